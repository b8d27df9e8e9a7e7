package image

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// dockerfileStage is what the final stage of a Dockerfile declares.
type dockerfileStage struct {
	from   string
	spec   Spec
	copies []string
}

// parseFinalStage reads the instructions after the last FROM. It knows
// only the forms deploy/Dockerfile uses, and fails on anything else, so
// an edit to the Dockerfile that this test cannot judge is noticed.
func parseFinalStage(t *testing.T, path string) dockerfileStage {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	var cont string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cont += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		lines = append(lines, cont+l)
		cont = ""
	}
	last := -1
	for i, l := range lines {
		if strings.HasPrefix(strings.ToUpper(l), "FROM ") {
			last = i
		}
	}
	if last < 0 {
		t.Fatal("no FROM")
	}
	jsonArray := func(s string) []string {
		var out []string
		if err := json.Unmarshal([]byte(s), &out); err != nil {
			t.Fatalf("%q is not the exec (JSON array) form: %v", s, err)
		}
		return out
	}
	var st dockerfileStage
	st.from = strings.Fields(lines[last])[1]
	for _, l := range lines[last+1:] {
		instr, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "USER":
			st.spec.User = rest
		case "ENV":
			k, v, ok := strings.Cut(rest, "=")
			if !ok || strings.ContainsAny(v, " \"") {
				t.Fatalf("ENV %q: write one KEY=VALUE per ENV line", rest)
			}
			st.spec.Env = append(st.spec.Env, k+"="+v)
		case "EXPOSE":
			st.spec.ExposedPorts = append(st.spec.ExposedPorts, strings.Fields(rest)...)
		case "VOLUME":
			st.spec.Volumes = append(st.spec.Volumes, jsonArray(rest)...)
		case "WORKDIR":
			st.spec.WorkingDir = rest
		case "ENTRYPOINT":
			st.spec.Entrypoint = jsonArray(rest)
		case "CMD":
			st.spec.Cmd = jsonArray(rest)
		case "COPY":
			st.copies = append(st.copies, rest)
		default:
			t.Fatalf("final stage: instruction %s is not checked by this test", instr)
		}
	}
	st.spec = st.spec.normalized()
	return st
}

// TestDockerfileMatchesImage holds deploy/Dockerfile to the image that
// make image builds: same base, user, entrypoint, environment, ports,
// volume, the same /etc files, the data directory owned by the user.
func TestDockerfileMatchesImage(t *testing.T) {
	st := parseFinalStage(t, filepath.Join("..", "Dockerfile"))
	if st.from != "scratch" {
		t.Errorf("final stage FROM %s, want scratch (the image holds only the static binary)", st.from)
	}
	if want := DefaultSpec().normalized(); !reflect.DeepEqual(st.spec, want) {
		t.Errorf("Dockerfile:\n got %s\nwant %s", st.spec, want)
	}
	copies := strings.Join(st.copies, "\n")
	for _, want := range []string{
		"deploy/image/rootfs/etc/passwd deploy/image/rootfs/etc/group /etc/",
		"--chown=65532:65532 /out/data " + DataDir,
		"/out/trustplane " + BinaryPath,
	} {
		if !strings.Contains(copies, want) {
			t.Errorf("Dockerfile has no COPY %q; its COPYs:\n%s", want, copies)
		}
	}
	// The build stage's Go must be the one go.mod asks for.
	mod, err := os.ReadFile(filepath.Join("..", "..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(mod)
	df, err := os.ReadFile(filepath.Join("..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if goLine == nil || !strings.Contains(string(df), "FROM golang:"+string(goLine[1])+" AS build") {
		t.Errorf("the build stage is not golang:%s (go.mod's go line)", goLine[1])
	}
}
