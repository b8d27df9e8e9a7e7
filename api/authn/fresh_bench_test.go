package authn

import (
	"context"
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	authenticationapi "k8s.io/kubernetes/pkg/apis/authentication"
	"k8s.io/kubernetes/pkg/registry/authentication/tokenreview"
)

// BenchmarkReviewFresh is what reviewFresh adds to a TokenReview over
// kube's REST alone ("kube"), with an authenticator that answers at once
// (as kube's token cache does for a token it has seen).
func BenchmarkReviewFresh(b *testing.B) {
	a := authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
		return &authenticator.Response{User: &user.DefaultInfo{Name: "u"}, Audiences: authenticator.Audiences{DefaultIssuer}}, true, nil
	})
	auds := authenticator.Audiences{DefaultIssuer}
	ctx := context.Background()
	kube := tokenreview.NewREST(a, auds)
	for _, bc := range []struct {
		name   string
		create func(obj *authenticationapi.TokenReview) error
	}{
		{"kube", func(obj *authenticationapi.TokenReview) error {
			_, err := kube.Create(ctx, obj, nil, &metav1.CreateOptions{})
			return err
		}},
		{"reviewFresh", func(obj *authenticationapi.TokenReview) error {
			_, err := reviewFresh(ctx, a, auds, obj, nil, &metav1.CreateOptions{})
			return err
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if err := bc.create(&authenticationapi.TokenReview{Spec: authenticationapi.TokenReviewSpec{Token: "t"}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
