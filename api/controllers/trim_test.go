package controllers

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TestTrimCached: the controllers' caches keep what the controllers read
// (the root CA ConfigMap, token Secrets, every owner reference, label and
// finalizer) and lose the rest; trimming twice changes nothing more.
func TestTrimCached(t *testing.T) {
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Name: name, Namespace: "ns", UID: "u", ResourceVersion: "7",
			Labels:          map[string]string{"l": "v"},
			Annotations:     map[string]string{"a": "payload"},
			OwnerReferences: []metav1.OwnerReference{{Name: "owner", UID: "o"}},
			Finalizers:      []string{"f"},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "m"}},
		}
	}
	trimmed := func(name string, keepAnnotations bool) metav1.ObjectMeta {
		m := meta(name)
		m.ManagedFields = nil
		if !keepAnnotations {
			m.Annotations = nil
		}
		return m
	}
	data := map[string]string{"k": "v"}
	bdata := map[string][]byte{"k": []byte("v")}
	for _, tc := range []struct {
		name     string
		in, want any
	}{
		{"a ConfigMap loses data and annotations",
			&corev1.ConfigMap{ObjectMeta: meta("cm"), Data: data, BinaryData: bdata},
			&corev1.ConfigMap{ObjectMeta: trimmed("cm", false)}},
		{"kube-root-ca.crt stays whole but for managedFields",
			&corev1.ConfigMap{ObjectMeta: meta("kube-root-ca.crt"), Data: data},
			&corev1.ConfigMap{ObjectMeta: trimmed("kube-root-ca.crt", true), Data: data}},
		{"an Opaque Secret loses data and annotations",
			&corev1.Secret{ObjectMeta: meta("s"), Type: corev1.SecretTypeOpaque, Data: bdata},
			&corev1.Secret{ObjectMeta: trimmed("s", false), Type: corev1.SecretTypeOpaque}},
		{"a token Secret stays whole but for managedFields",
			&corev1.Secret{ObjectMeta: meta("t"), Type: corev1.SecretTypeServiceAccountToken, Data: bdata},
			&corev1.Secret{ObjectMeta: trimmed("t", true), Type: corev1.SecretTypeServiceAccountToken, Data: bdata}},
		{"a ServiceAccount loses annotations, keeps its secrets",
			&corev1.ServiceAccount{ObjectMeta: meta("sa"), Secrets: []corev1.ObjectReference{{Name: "t"}}},
			&corev1.ServiceAccount{ObjectMeta: trimmed("sa", false), Secrets: []corev1.ObjectReference{{Name: "t"}}}},
		{"other kinds lose managedFields only",
			&corev1.Namespace{ObjectMeta: meta("n")},
			&corev1.Namespace{ObjectMeta: trimmed("n", true)}},
		{"metadata-only objects lose managedFields only",
			&metav1.PartialObjectMetadata{ObjectMeta: meta("p")},
			&metav1.PartialObjectMetadata{ObjectMeta: trimmed("p", true)}},
		{"a tombstone passes unchanged",
			cache.DeletedFinalStateUnknown{Key: "ns/x"},
			cache.DeletedFinalStateUnknown{Key: "ns/x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for pass := range 2 {
				got, err := trimCached(tc.in)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("pass %d:\n got %#v\nwant %#v", pass, got, tc.want)
				}
				tc.in = got
			}
		})
	}
}
