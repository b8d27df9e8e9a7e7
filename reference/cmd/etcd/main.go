// Command etcd is upstream etcd, built from go.etcd.io/etcd/server/v3 at
// the version reference/go.mod pins: kube-apiserver's storage for make
// reference.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
