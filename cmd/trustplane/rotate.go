package main

import (
	"bytes"
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

	"github.com/trustplane/trustplane/api/caroots"
	"github.com/trustplane/trustplane/api/gossipkeys"
	"github.com/trustplane/trustplane/api/rotation"
)

// rotateUsage is the command's synopsis.
const rotateUsage = "usage: trustplane rotate ROOT STEP [--kubeconfig F] [--force] [--key-file F] [--signer NAME]\n" +
	"  ROOT: signing-key, gossip-key, encryption-key, node-ca, cluster-ca, signer-ca (with --signer: a built-in signer given CA files of its own)\n" +
	"  STEP: status, start, promote, finish, abort"

// rotateCmd implements "trustplane rotate ROOT STEP": one step of a trust
// root's rotation (api/rotation), over the API as the kubeconfig's user
// (system:masters), run by the leader. It prints the root's status after
// the step; a step the cluster is not ready for fails with the reason.
func rotateCmd(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("rotate", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", defaultKubeconfig(), "admin kubeconfig of any node")
	force := fs.Bool("force", false, "take the step even though a safety check refuses it (finish before the retiring key's tokens expire)")
	signer := fs.String("signer", "", "signer-ca only: the signer whose CA rotates (kubernetes.io/kube-apiserver-client, kubernetes.io/kube-apiserver-client-kubelet, kubernetes.io/kubelet-serving)")
	keyFile := fs.String("key-file", "", "start only: the new key, for a root whose key you keep a copy of (gossip-key: base64 of 32 bytes, as gossip.key; node-ca, cluster-ca and signer-ca: the CA's certificate and private key in PEM, as node-ca.crt and node-ca.key, or ca.crt and ca.key, concatenated)")
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos, rest = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if len(pos) != 2 {
		return errors.New(rotateUsage)
	}
	root, step := pos[0], rotation.Step(pos[1])
	switch {
	case root == "signer-ca" && *signer == "":
		return fmt.Errorf("signer-ca needs --signer NAME\n%s", rotateUsage)
	case root == "signer-ca":
		root = caroots.SignerKind(*signer).Root
	case *signer != "":
		return fmt.Errorf("--signer is for signer-ca only\n%s", rotateUsage)
	}
	known := false
	for _, s := range rotation.Steps {
		known = known || s == step
	}
	if !known {
		return fmt.Errorf("unknown step %q\n%s", step, rotateUsage)
	}
	path := rotation.Path(root, step)
	if *force {
		path += "?force=true"
	}
	client, url, err := operatorClient(*kubeconfig, path)
	if err != nil {
		return err
	}
	client.Timeout = 60 * time.Second
	var reqBody io.Reader
	if *keyFile != "" {
		if step != rotation.StepStart {
			return errors.New("--key-file is for start only")
		}
		var key []byte
		if root == gossipkeys.Root {
			key, err = parseGossipKeyFile(*keyFile)
		} else {
			key, err = os.ReadFile(*keyFile)
		}
		if err != nil {
			return err
		}
		b, _ := json.Marshal(map[string][]byte{"key": key})
		reqBody = bytes.NewReader(b)
	}
	resp, err := client.Post(url, "application/json", reqBody)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		if pos[0] == "signer-ca" {
			return fmt.Errorf("signer %s has no CA of its own on this server: it signs with the cluster CA, which `trustplane rotate cluster-ca` rotates (or it is no built-in signer)", *signer)
		}
		return fmt.Errorf("%s cannot be rotated online by this server\n%s", root, rotateUsage)
	default:
		return fmt.Errorf("%s %s: %s", root, step, strings.TrimSpace(string(body)))
	}
	var st rotation.Status
	if err := json.Unmarshal(body, &st); err != nil {
		return fmt.Errorf("%s %s: unreadable answer: %w", root, step, err)
	}
	printRotation(out, &st)
	return nil
}

// printRotation prints a root's status for an operator.
func printRotation(out io.Writer, st *rotation.Status) {
	if st.Done != "" {
		fmt.Fprintln(out, st.Done)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tPHASE\tISSUES\tSINCE\tCREATED")
	for _, k := range st.Keys {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\n", k.ID, k.Phase, k.Issues, age(k.Since), age(k.Created))
	}
	tw.Flush()
	if len(st.Members) > 0 {
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "MEMBER\tTRUSTS THE KEYS\tDETAIL")
		for _, m := range st.Members {
			fmt.Fprintf(tw, "%s\t%v\t%s\n", m.Name, m.Trusts, m.Detail)
		}
		tw.Flush()
	}
	if st.Progress != "" {
		fmt.Fprintf(out, "progress: %s\n", st.Progress)
	}
	switch {
	case st.Next == "":
		fmt.Fprintln(out, "no rotation in progress; start begins one")
	case st.Waiting != "":
		fmt.Fprintf(out, "next: %s, waiting: %s\n", st.Next, st.Waiting)
	default:
		fmt.Fprintf(out, "next: %s\n", st.Next)
	}
}

// age prints how long ago t was, "unknown" for the zero time.
func age(t time.Time) string {
	if t.IsZero() {
		return "unknown"
	}
	return time.Since(t).Round(time.Second).String() + " ago"
}
