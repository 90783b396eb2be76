package volume

import (
	"bytes"
	"testing"

	"github.com/cairn-storage/cairn/internal/bufpool"
)

func TestMerge(t *testing.T) {
	w := func(off uint64, s string) *queuedWrite { return &queuedWrite{off: off, data: []byte(s)} }
	for _, c := range []struct {
		name  string
		batch []*queuedWrite
		start uint64
		want  string // "" : not merged
	}{
		{"one write is sent as it is", []*queuedWrite{w(5, "abc")}, 0, ""},
		{"adjacent, in order", []*queuedWrite{w(10, "aa"), w(12, "bb"), w(14, "cc")}, 10, "aabbcc"},
		{"adjacent, out of order", []*queuedWrite{w(14, "cc"), w(10, "aa"), w(12, "bb")}, 10, "aabbcc"},
		{"a later write wins where they overlap", []*queuedWrite{w(0, "aaaa"), w(2, "bbbb"), w(1, "c")}, 0, "acbbbb"},
		{"an earlier write loses even when it starts later", []*queuedWrite{w(3, "zz"), w(0, "yyyyyy")}, 0, "yyyyyy"},
		{"a gap: sent one by one", []*queuedWrite{w(0, "aa"), w(3, "bb")}, 0, ""},
		{"a gap after sorting", []*queuedWrite{w(8, "cc"), w(0, "aaaa"), w(4, "b")}, 0, ""},
	} {
		start, buf, ok := merge(c.batch)
		if ok != (c.want != "") {
			t.Fatalf("%s: merged %v", c.name, ok)
		}
		if !ok {
			continue
		}
		if start != c.start || !bytes.Equal(buf, []byte(c.want)) {
			t.Fatalf("%s: got %q at %d, want %q at %d", c.name, buf, start, c.want, c.start)
		}
		bufpool.Put(buf)
	}
}
