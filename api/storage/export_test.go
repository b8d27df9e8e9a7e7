package storage

import "testing"

// SetMaxItemEncodingBytes lowers the node's budget of cached list-item
// encodings, for tests.
func (s *Storage) SetMaxItemEncodingBytes(n int64) { s.maxItemEncodings = n }

// ItemEncodingBytes is what the node's cached list-item encodings hold.
func (s *Storage) ItemEncodingBytes() int64 { return s.itemEncodings.Load() }

// MustForResource is ForResource for tests, which fails t on an error.
func (s *Storage) MustForResource(t testing.TB, cfg ResourceConfig) *Store {
	t.Helper()
	st, err := s.ForResource(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
