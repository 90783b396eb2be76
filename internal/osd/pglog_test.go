package osd

import (
	"strings"
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/mapview"
	"github.com/cairn-storage/cairn/internal/objstore"
)

// A PG's version comes back after a restart from its newest delete's
// version and from a legacy PG log, whichever is newer.
func TestPGVersionLoad(t *testing.T) {
	st, err := objstore.Open(objstore.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pg := func(seed uint32) clustermap.PGID { return clustermap.PGID{Pool: 1, Seed: seed} }
	apply := func(f func(*objstore.Txn)) {
		t.Helper()
		txn := &objstore.Txn{}
		f(txn)
		if err := st.Apply(txn); err != nil {
			t.Fatal(err)
		}
	}
	legacyLog := func(id clustermap.PGID, from, to uint64) {
		apply(func(txn *objstore.Txn) {
			for v := from; v <= to; v++ {
				txn.OmapSet(id.String(), pgMetaObject, encodeVersion(v), []byte("legacy entry"))
			}
		})
	}
	// A legacy log longer than a listing page, with scrub times after it.
	legacyLog(pg(1), 1, 1500)
	apply(func(txn *objstore.Txn) {
		txn.OmapSet(pg(1).String(), pgMetaObject, keyLastScrub, make([]byte, 8))
	})
	// A legacy log, then deletes by this build.
	legacyLog(pg(2), 10, 20)
	apply(func(txn *objstore.Txn) {
		txn.OmapSet(pg(2).String(), pgMetaObject, keyDeleteVersion, encodeVersion(37))
	})
	// Deletes only, with an older legacy entry than the delete.
	legacyLog(pg(3), 90, 90)
	apply(func(txn *objstore.Txn) {
		txn.OmapSet(pg(3).String(), pgMetaObject, keyDeleteVersion, encodeVersion(7))
	})
	// A version of the wrong length.
	apply(func(txn *objstore.Txn) {
		txn.OmapSet(pg(5).String(), pgMetaObject, keyDeleteVersion, []byte{1, 2, 3})
	})

	s := &Server{store: st, view: mapview.Static(&clustermap.Map{Epoch: 1}), pgs: map[clustermap.PGID]*pgState{}}
	for seed, want := range map[uint32]uint64{1: 1500, 2: 37, 3: 90, 4: 0} {
		p, err := s.pg(pg(seed))
		if err != nil {
			t.Fatalf("pg %s: %v", pg(seed), err)
		}
		if p.version != want {
			t.Errorf("pg %s loaded version %d, want %d", pg(seed), p.version, want)
		}
	}
	if _, err := s.pg(pg(5)); err == nil || !strings.Contains(err.Error(), "3 bytes") {
		t.Errorf("a 3-byte delete version: %v, want an error naming its length", err)
	}
}
