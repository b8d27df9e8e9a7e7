package history

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Kind is what an operation did.
type Kind string

const (
	// Create, Update and Delete are writes of one ConfigMap key. Update
	// and Delete carry a resourceVersion precondition in ExpectRV (0: none).
	Create Kind = "create"
	Update Kind = "update"
	Delete Kind = "delete"
	// Get reads one key; List reads every key of the run's namespace at
	// one resourceVersion. With Local set they were resourceVersion=0
	// reads served from the node's own state.
	Get  Kind = "get"
	List Kind = "list"
	// CSRCreate creates a CertificateSigningRequest (Key is its name);
	// CSRApprove approves it through the approval subresource.
	CSRCreate  Kind = "csr-create"
	CSRApprove Kind = "csr-approve"
	// TokenMint requests a ServiceAccount token (Key is the token's id in
	// the run, Read its key id); TokenReview reviews one (Exists: it
	// authenticated); TokenVerify checks one's signature with the JWKS, as
	// a relying party does (Exists: it verified). None changes state.
	TokenMint   Kind = "token-mint"
	TokenReview Kind = "token-review"
	TokenVerify Kind = "token-jwks"
)

// IsWrite reports whether the kind changes state.
func (k Kind) IsWrite() bool {
	switch k {
	case Create, Update, Delete, CSRCreate, CSRApprove:
		return true
	}
	return false
}

// Outcome is what the client learned from the answer.
type Outcome string

const (
	// OK: the server answered success.
	OK Outcome = "ok"
	// Fail: the server answered that the operation had no effect
	// (409 Conflict, 404, 422, or a 429/503 with Retry-After that says
	// the request was not processed).
	Fail Outcome = "fail"
	// Unknown: the answer does not say whether a write happened (a 504,
	// a connection cut after the request was sent, a client timeout).
	// For a read it means no answer; reads that were Unknown are ignored.
	Unknown Outcome = "unknown"
)

// Item is one key's state as read or written.
type Item struct {
	Value string `json:"value"`
	RV    uint64 `json:"rv"`
}

// Op is one request of the workload and its answer.
type Op struct {
	ID     int64  `json:"id"`
	Client int    `json:"client"`
	Node   string `json:"node"`
	Kind   Kind   `json:"kind"`
	Key    string `json:"key,omitempty"`
	// Value is what a create or update wrote (unique in the run).
	Value string `json:"value,omitempty"`
	// ExpectRV is the resourceVersion precondition of an update or delete.
	ExpectRV uint64 `json:"expectRV,omitempty"`
	// Local: a resourceVersion=0 read served from the node's own state.
	// Such reads are not linearizable by contract; the staleness checker
	// bounds them instead.
	Local bool `json:"local,omitempty"`

	Outcome Outcome `json:"outcome"`
	// Code is the HTTP status (0 when none arrived); Reason the Status
	// reason or the transport error, for the report.
	Code   int    `json:"code,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Exists and Read are a Get's answer.
	Exists bool   `json:"exists,omitempty"`
	Read   string `json:"read,omitempty"`
	// RV is the object's resourceVersion after a successful create or
	// update, the object's for a get, the list's for a list.
	RV uint64 `json:"rv,omitempty"`
	// Items is a List's answer: key → value and resourceVersion.
	Items map[string]Item `json:"items,omitempty"`

	Call   int64 `json:"call"`
	Return int64 `json:"return"`
}

// EventType is a watch event's type.
type EventType string

const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
	Bookmark EventType = "BOOKMARK"
)

// Resource names which watch an event came from.
type Resource string

const (
	ConfigMaps Resource = "configmaps"
	CSRs       Resource = "certificatesigningrequests"
)

// Event is one watch event a node delivered.
type Event struct {
	Node     string   `json:"node"`
	Resource Resource `json:"resource"`
	// Session numbers the node's watch connections for this resource:
	// each reconnect (after a disconnect or a node restart) starts a new
	// session that resumes from the last resourceVersion the previous one
	// delivered.
	Session int       `json:"session"`
	Type    EventType `json:"type"`
	Key     string    `json:"key,omitempty"`
	// Value is the ConfigMap's value, or for a CSR a digest of
	// status.certificate ("" while unsigned).
	Value string `json:"value,omitempty"`
	// Approved is set on CSR events whose object carries the Approved
	// condition.
	Approved bool   `json:"approved,omitempty"`
	RV       uint64 `json:"rv"`
	At       int64  `json:"at"`
}

// Session is one watch connection: where it started and why it ended.
type Session struct {
	Node     string   `json:"node"`
	Resource Resource `json:"resource"`
	Session  int      `json:"session"`
	// StartRV is the resourceVersion the watch was opened from.
	StartRV uint64 `json:"startRV"`
	// End says why it ended: "closed" (the server ended it), "cut" (the
	// workload disconnected it on purpose), "error: ..." (transport),
	// "gone" (410: the start was compacted away), "run end".
	End     string `json:"end"`
	Started int64  `json:"started"`
	Ended   int64  `json:"ended"`
}

// State is a node's final state, read locally after the run settled.
type State struct {
	// RV is the list resourceVersion the ConfigMaps were read at.
	RV         uint64          `json:"rv"`
	ConfigMaps map[string]Item `json:"configMaps"`
	// CSRs maps each CSR the run created to its certificate digest.
	CSRs map[string]string `json:"csrs"`
	// Err is set when the node could not be read at the end.
	Err string `json:"err,omitempty"`
}

// History is everything one run recorded.
type History struct {
	Started time.Time `json:"started"`
	// Nodes are the node names in the run, in order.
	Nodes []string `json:"nodes"`
	// StartRV is the resourceVersion the run began at: every watch
	// starts here, so every write of the run is after it.
	StartRV uint64 `json:"startRV"`
	// MaxStaleRead is the servers' --max-stale-read, the bound the
	// staleness checker holds resourceVersion=0 reads to.
	MaxStaleRead time.Duration `json:"maxStaleRead"`
	Ops          []Op          `json:"ops"`
	Events       []Event       `json:"events"`
	Sessions     []Session     `json:"sessions"`
	// Final is each node's state after the run settled.
	Final map[string]State `json:"final"`
	// End is when the workload stopped (ns since start); Settled when the
	// final states were read.
	End int64 `json:"end"`
}

// Write encodes h as JSON.
func (h *History) Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(h)
}

// Read decodes a history written by Write.
func Read(r io.Reader) (*History, error) {
	var h History
	if err := json.NewDecoder(r).Decode(&h); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	return &h, nil
}
