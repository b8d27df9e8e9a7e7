package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/trustplane/trustplane/api"
)

// membersCmd implements "trustplane members" (list) and
// "trustplane members remove NAME" against a node's operator endpoint.
func membersCmd(args []string) error {
	fs := flag.NewFlagSet("members", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", defaultKubeconfig(), "admin kubeconfig of any node")
	if err := fs.Parse(args); err != nil {
		return err
	}
	client, url, err := operatorClient(*kubeconfig, "/debug/trustplane/members")
	if err != nil {
		return err
	}
	client.Timeout = 15 * time.Second
	switch rest := fs.Args(); {
	case len(rest) == 0:
		if err := listMembers(client, url); err != nil {
			return err
		}
		printFormats(os.Stdout, client, strings.TrimSuffix(url, "/members")+"/raft")
		return nil
	case len(rest) == 2 && rest[0] == "remove":
		req, _ := http.NewRequest(http.MethodDelete, url+"/"+rest[1], nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return statusError(resp)
		}
		fmt.Printf("member %s removed; it stays out until it is started again with an empty data directory\n", rest[1])
		return nil
	default:
		return errors.New("usage: trustplane members [--kubeconfig F] [remove NAME]")
	}
}

// operatorClient is an HTTP client with kubeconfig's credentials and the
// URL of path on its server: the operator endpoints (members, snapshot)
// are plain HTTP, not API resources, so they need no client-go clientset.
func operatorClient(kubeconfig, path string) (*http.Client, string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, "", err
	}
	return client, strings.TrimSuffix(cfg.Host, "/") + path, nil
}

func defaultKubeconfig() string {
	if k := os.Getenv("KUBECONFIG"); k != "" {
		return k
	}
	return "./trustplane-data/admin.kubeconfig"
}

func listMembers(client *http.Client, url string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return statusError(resp)
	}
	var members []api.Member
	if err := json.NewDecoder(resp.Body).Decode(&members); err != nil {
		return fmt.Errorf("decoding members: %w", err)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROLE\tSTATUS\tRAFT-STATE\tLAST-CONTACT\tAPPLIED-INDEX\tVERSION\tAPI\tRAFT")
	for _, m := range members {
		role := "non-voter"
		switch {
		case m.Voter:
			role = "voter"
		case m.Replica:
			role = "replica"
		}
		contact := "-"
		if m.LastContact >= 0 {
			contact = m.LastContact.Round(time.Millisecond).String()
		}
		version := m.Version
		if version == "" {
			version = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", m.Name, role, m.Status, m.RaftState, contact, m.AppliedIndex, version, m.APIAddr, m.RaftAddr)
	}
	return tw.Flush()
}

// printFormats prints the versions of each format the cluster writes, as
// the node at raftURL found them, and what holds a format back. A node of
// a build that does not report them prints nothing.
func printFormats(w io.Writer, client *http.Client, raftURL string) {
	resp, err := client.Get(raftURL)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var st api.RaftStatus
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil || len(st.Formats) == 0 {
		return
	}
	fmt.Fprintln(w, "\nformats the cluster writes (newest that every member reads):")
	for _, f := range st.Formats {
		line := fmt.Sprintf("  %s %d", f.Name, f.Version)
		if f.Version < f.Newest {
			line += fmt.Sprintf(" (this build writes %d once every member reads it: %s)", f.Newest, strings.Join(f.Behind, "; "))
		}
		fmt.Fprintln(w, line)
	}
}

func statusError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var st struct{ Message string }
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		return fmt.Errorf("%s: %s", resp.Status, st.Message)
	}
	return fmt.Errorf("%s: %s", resp.Status, body)
}
