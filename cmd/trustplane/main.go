package main

import (
	"fmt"
	"os"
)

func main() {
	args := os.Args[1:]
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "serve":
		err = serve(args)
	case "certs":
		err = certsCmd(args)
	case "members":
		err = membersCmd(args)
	case "rotate":
		err = rotateCmd(args, os.Stdout)
	case "snapshot":
		err = snapshotCmd(args)
	case "kubeconfig":
		err = kubeconfigCmd(args, os.Stdout)
	case "external-signer":
		err = externalSignerCmd(args)
	case "chaos":
		err = chaosCmd(args)
	case "bench":
		err = benchCmd(args)
	case "version":
		fmt.Println(versionString())
	case "help":
		usage()
	default:
		usage()
		err = fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "trustplane:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `trustplane: a Kubernetes-compatible identity and certificate API on Raft

Usage:
  trustplane [serve] [flags]        run a node (default)
  trustplane certs init --dir DIR   create a shared cluster CA and gossip key
  trustplane certs init --secret NAME [--namespace NS] [--kubeconfig F]
                                    the same, into a Kubernetes Secret (kept if it exists)
  trustplane kubeconfig [--data-dir D] [--server URL]
                                    print the node's admin kubeconfig
  trustplane members [remove NAME]  list the cluster's nodes, or remove a dead one
  trustplane rotate ROOT STEP [--force]
                                    rotate a trust root online: signing-key; steps status,
                                    start, promote, finish, abort (docs/SECURITY.md §6)
  trustplane snapshot save|inspect|restore
                                    back up a running cluster, check a backup, seed a
                                    new cluster from one (docs/OPERATIONS.md)
  trustplane external-signer --socket PATH [--kubeconfig F]
                                    sign another kube-apiserver's ServiceAccount tokens
                                    here: kube's ExternalJWTSigner on a unix socket
                                    (docs/OPERATIONS.md, Fleet identity)
  trustplane chaos local|attach|check [flags]
                                    kill, pause and partition nodes under a workload,
                                    then check linearizability and watches (docs/CHAOS.md)
  trustplane bench [flags]          measure throughput and latency of any cluster (kube-apiserver
                                    too) through its kubeconfigs; "bench -h" for the flags
  trustplane bench compare A.json B.json
                                    ratios B/A of two bench results
  trustplane version                print the version

Run "trustplane serve -h" for the node's flags.
`)
}
