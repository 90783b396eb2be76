package objstore

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestObjFilterNeverMissesAnAddedKey(t *testing.T) {
	const n = 100_000
	f := newObjFilter(n, maphash.MakeSeed())
	for i := range n {
		f.add(objKey("1.2a", fmt.Sprintf("obj-%d", i)))
	}
	falseYes := 0
	for i := range n {
		if !f.mayContain(objKey("1.2a", fmt.Sprintf("obj-%d", i))) {
			t.Fatalf("added key %d: the filter says it is absent", i)
		}
		if f.mayContain(objKey("1.2a", fmt.Sprintf("other-%d", i))) {
			falseYes++
		}
	}
	// Sized for twice the keys: well under 1% false yeses.
	if rate := float64(falseYes) / n; rate > 0.01 {
		t.Fatalf("%.2f%% of absent keys got a yes, want under 1%%", 100*rate)
	}
	if got := f.added.Load(); got < n*99/100 || got > n {
		t.Fatalf("added counts %d of %d distinct keys", got, n)
	}
}

// The store answers lookups of absent objects from the filter, finds every
// object that exists, before and after a reopen, and once the filter has
// taken far more keys than it was sized for, goes on without it.
func TestStoreFilter(t *testing.T) {
	old := filterMinKeys
	filterMinKeys = 64
	defer func() { filterMinKeys = old }()

	fs := vfs.NewMem()
	s := openMem(t, fs)
	put := func(name string) {
		apply(t, s, func(tx *Txn) { tx.Put("c", name, []byte(name)) })
	}
	check := func(names ...string) {
		t.Helper()
		for _, name := range names {
			if got := mustRead(t, s, "c", name, 0, 0); !bytes.Equal(got, []byte(name)) {
				t.Fatalf("%s reads %q", name, got)
			}
		}
	}
	if s.filter.Load() == nil {
		t.Fatal("an empty store opened without a filter")
	}
	skips := s.filterSkips.Load()
	var names []string
	for i := range 100 {
		names = append(names, fmt.Sprintf("o%d", i))
		put(names[i])
	}
	if got := s.filterSkips.Load() - skips; got < 95 {
		t.Fatalf("of 100 creates, %d looked up their record through the filter alone, want nearly all", got)
	}
	check(names...)
	apply(t, s, func(tx *Txn) { tx.Delete("c", "o7") })
	if _, err := s.Stat("c", "o7"); err == nil {
		t.Fatal("a deleted object still exists")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openMem(t, fs) // sized for the 99 objects there are: 198 keys
	defer s.Close()
	f := s.filter.Load()
	if f == nil || f.capacity != 198 {
		t.Fatalf("reopened store's filter: %+v, want one sized for 198 keys", f)
	}
	check(append(names[:7:7], names[8:]...)...)
	for i := 100; s.filter.Load() != nil; i++ {
		if i > 4000 {
			t.Fatal("the filter stayed in use long after it was overfull")
		}
		names = append(names, fmt.Sprintf("o%d", i))
		put(names[len(names)-1])
	}
	if f.added.Load() <= 4*f.capacity {
		t.Fatalf("disabled after %d adds, capacity %d", f.added.Load(), f.capacity)
	}
	skips = s.filterSkips.Load()
	put("after")
	check(append(names[:7:7], names[8:]...)...)
	check("after")
	if s.filterSkips.Load() != skips {
		t.Fatal("a disabled filter still answered lookups")
	}
}
