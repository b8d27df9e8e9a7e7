package storage

// SetMaxItemEncodingBytes lowers the node's budget of cached list-item
// encodings, for tests.
func (s *Storage) SetMaxItemEncodingBytes(n int64) { s.maxItemEncodings = n }

// ItemEncodingBytes is what the node's cached list-item encodings hold.
func (s *Storage) ItemEncodingBytes() int64 { return s.itemEncodings.Load() }
