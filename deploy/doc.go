// Package deploy holds what ships trustplane to operators: the Helm chart
// (chart/trustplane), the container image build (image) and their tests.
//
// It is its own Go module so that the tools it needs (helm, the image
// library, kube's validation from k8s.io/kubernetes) never enter the
// server's module graph: the trustplane binary is built from the root
// module alone.
package deploy
