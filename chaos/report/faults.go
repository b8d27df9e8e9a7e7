package report

import (
	"encoding/json"
	"fmt"
	"io"
)

// FaultsFile is the name of a run's fault record, written beside its
// history.json.
const FaultsFile = "faults.json"

// Recorded is what a run measured of its faults while it ran (each
// fault's steps, its catch-up, the gossip flaps and elections during a
// rotation) and of the leader: the part of a report that the history
// alone cannot give, so that "trustplane chaos check" can judge a
// recorded run's rotations and catch-ups again, as it judges its history.
type Recorded struct {
	Faults        []Fault `json:"faults"`
	LeaderChanges int     `json:"leaderChanges"`
	TermRise      int     `json:"termRise"`
}

// WriteRecorded writes r as JSON.
func WriteRecorded(w io.Writer, r Recorded) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(r)
}

// ReadRecorded decodes what WriteRecorded wrote.
func ReadRecorded(rd io.Reader) (Recorded, error) {
	var r Recorded
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return Recorded{}, fmt.Errorf("report: %s: %w", FaultsFile, err)
	}
	return r, nil
}
