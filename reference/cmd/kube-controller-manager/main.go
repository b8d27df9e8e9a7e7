// Command kube-controller-manager is upstream kube-controller-manager,
// built from k8s.io/kubernetes at the version reference/go.mod pins. make
// reference runs it for the CSR signer and the controllers trustplane runs
// itself.
package main

import (
	"os"
	_ "time/tzdata" // for CronJob time zones, as upstream

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as upstream
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as upstream
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
