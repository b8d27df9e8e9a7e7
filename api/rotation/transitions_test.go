package rotation

import (
	"errors"
	"reflect"
	"testing"
)

func TestTransitions(t *testing.T) {
	one := []Entry{{ID: "a", Phase: Active, Since: 1, Created: 1}}
	started, err := AddPending(one, "b", 10)
	if err != nil || !reflect.DeepEqual(started, []Entry{{ID: "b", Phase: Pending, Since: 10, Created: 10}, one[0]}) {
		t.Fatalf("AddPending = %v, %v", started, err)
	}
	if _, err := AddPending(started, "c", 11); !errors.Is(err, ErrNotReady) {
		t.Fatalf("a second start: %v", err)
	}
	if _, err := AddPending(one, "a", 11); !errors.Is(err, ErrNotReady) {
		t.Fatalf("a key that is in the set: %v", err)
	}
	promoted, p, err := Promote(started, 20)
	if err != nil || p.ID != "b" || promoted[0].Phase != Active || promoted[1].Phase != Retiring || promoted[1].Since != 20 {
		t.Fatalf("Promote = %v, %v, %v", promoted, p, err)
	}
	if started[0].Phase != Pending {
		t.Fatal("Promote changed its input")
	}
	if _, _, err := Promote(promoted, 21); !errors.Is(err, ErrNoRotation) {
		t.Fatalf("promote without a pending key: %v", err)
	}
	if _, err := AddPending(promoted, "c", 21); !errors.Is(err, ErrNotReady) {
		t.Fatalf("start while a key retires: %v", err)
	}
	kept, removed := Finish(promoted)
	if len(kept) != 1 || kept[0].ID != "b" || len(removed) != 1 || removed[0].ID != "a" {
		t.Fatalf("Finish = %v, %v", kept, removed)
	}
	back, _, err := Abort(promoted, 30)
	if err != nil || back[0].Phase != Retiring || back[1].Phase != Active || back[1].Since != 30 {
		t.Fatalf("Abort after promote = %v, %v", back, err)
	}
	dropped, _, err := Abort(started, 30)
	if err != nil || !reflect.DeepEqual(dropped, one) {
		t.Fatalf("Abort of a pending key = %v, %v", dropped, err)
	}
	if _, _, err := Abort(one, 30); !errors.Is(err, ErrNoRotation) {
		t.Fatalf("abort with nothing in progress: %v", err)
	}
	if ks := Keys(promoted); len(ks) != 2 || !ks[0].Issues || ks[1].Issues || ks[0].Since.Unix() != 20 {
		t.Fatalf("Keys = %+v", ks)
	}
}

func TestWithEntries(t *testing.T) {
	ks := []Keyed{{Entry: Entry{ID: "a", Phase: Active}, Key: []byte("ka")}, {Entry: Entry{ID: "b", Phase: Retiring}, Key: []byte("kb")}}
	es := []Entry{{ID: "c", Phase: Pending}, {ID: "a", Phase: Active}}
	got := WithEntries(ks, es, map[string][]byte{"c": []byte("kc")})
	if len(got) != 2 || got[0].ID != "c" || string(got[0].Key) != "kc" || got[1].ID != "a" || string(got[1].Key) != "ka" {
		t.Fatalf("WithEntries = %+v", got)
	}
	if es := EntriesOf(got); len(es) != 2 || es[0].Phase != Pending || es[1].Phase != Active {
		t.Fatalf("EntriesOf = %+v", es)
	}
	if string(ks[0].Key) != "ka" || len(ks) != 2 {
		t.Fatal("WithEntries changed its input")
	}
}
