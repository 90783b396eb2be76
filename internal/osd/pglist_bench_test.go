package osd

import (
	"fmt"
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/mapview"
	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/pg"
	"github.com/cairn-storage/cairn/internal/proto"
)

// BenchmarkPeeringList measures what peering costs per object: listing a
// PG's copy with each object's eversion and size (OpPGList without
// digests), for a PG of 10,000 small objects.
func BenchmarkPeeringList(b *testing.B) {
	st, err := objstore.Open(objstore.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	id := clustermap.PGID{Pool: 1, Seed: 7}
	const n = 10000
	for i := 0; i < n; i += 500 {
		txn := &objstore.Txn{}
		for j := i; j < i+500; j++ {
			name := fmt.Sprintf("obj-%05d", j)
			txn.Put(id.String(), name, make([]byte, 4096))
			txn.SetXattr(id.String(), name, versionXattr, pg.EVersion{Epoch: 3, Version: uint64(j)}.Encode())
		}
		if err := st.Apply(txn); err != nil {
			b.Fatal(err)
		}
	}
	s := &Server{store: st, view: mapview.Static(&clustermap.Map{Epoch: 1}), pgs: map[clustermap.PGID]*pgState{}}
	b.ResetTimer()
	for range b.N {
		var start []byte
		got := 0
		for {
			r := s.pgList(&proto.Request{Op: proto.OpPGList, PG: id, Start: start, Limit: pgListPage})
			if r.Status != proto.StatusOK {
				b.Fatal(r.Message)
			}
			got += len(r.KVs)
			if !r.More {
				break
			}
			start = r.Data
		}
		if got != n {
			b.Fatalf("listed %d objects, want %d", got, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/object")
}
