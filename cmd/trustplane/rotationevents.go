package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/trustplane/trustplane/api/rotation"
)

// rotationEventsNamespace is where the steps' Events are recorded, about
// the namespace itself (a root is no object of the API).
const rotationEventsNamespace = "kube-system"

// rotationEvents records each step of a trust root's rotation (taken or
// refused) as an events.k8s.io/v1 Event in kube-system, written through
// the node's own API as system:apiserver, so `kubectl get events -n
// kube-system` shows every step. Steps taken before the API serves (none
// can be) are not recorded.
type rotationEvents struct {
	log    *slog.Logger
	node   string
	client atomic.Pointer[kubernetes.Clientset]
}

// use starts recording through the API cfg points at.
func (r *rotationEvents) use(cfg *rest.Config) error {
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	r.client.Store(c)
	return nil
}

// maxNoteBytes is events.k8s.io/v1's bound on an Event's note.
const maxNoteBytes = 1024

// reasons are the Events' reasons by step taken.
var reasons = map[rotation.Step]string{
	rotation.StepStart: "RotationStarted", rotation.StepPromote: "RotationPromoted",
	rotation.StepFinish: "RotationFinished", rotation.StepAbort: "RotationAborted",
}

// Step records one step (rotation.Recorder). It does not wait for the
// write: the step's answer does not depend on it. Neither a status nor an
// error of a step carries key material (api/rotation's rule), so the note
// may quote them.
func (r *rotationEvents) Step(root string, step rotation.Step, st *rotation.Status, err error) {
	c := r.client.Load()
	if c == nil {
		return
	}
	now := time.Now()
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("trustplane-rotation.%x", now.UnixNano()), Namespace: rotationEventsNamespace},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: "trustplane.io/rotation",
		ReportingInstance:   r.node,
		Action:              "Rotate" + strings.ToUpper(string(step[:1])) + string(step[1:]),
		Regarding:           corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: rotationEventsNamespace},
		Type:                corev1.EventTypeNormal,
		Reason:              reasons[step],
	}
	switch {
	case err != nil:
		ev.Type, ev.Reason, ev.Note = corev1.EventTypeWarning, "RotationRefused", fmt.Sprintf("%s %s refused: %v", root, step, err)
	case st != nil:
		ev.Note = fmt.Sprintf("%s %s: %s", root, step, st.Done)
	}
	if len(ev.Note) > maxNoteBytes {
		ev.Note = ev.Note[:maxNoteBytes-3] + "..."
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.EventsV1().Events(rotationEventsNamespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			r.log.Warn("recording a rotation step", "root", root, "step", step, "error", err)
		}
	}()
}
