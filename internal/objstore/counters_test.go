package objstore

import (
	"fmt"
	"sync"
	"testing"
)

// TestCountersFollowTheWork: commits show as synced log writes carrying
// them (concurrent ones batched: never more writes than commits), reads
// as index lookups, overwrites of a large object as copy-on-write.
func TestCountersFollowTheWork(t *testing.T) {
	s := openReal(t, t.TempDir())
	defer s.Close()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 20 {
				var tx Txn
				tx.Put("1.0", fmt.Sprintf("o-%d-%d", w, i), pattern(i, 4096))
				if err := s.Apply(&tx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for i := range 20 {
		if _, err := s.Read("1.0", fmt.Sprintf("o-0-%d", i), 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	c := s.Counters()
	if c.LogWrites == 0 || c.LogCommits < 160 || c.LogWrites > c.LogCommits || c.LogBytes < c.LogWrites*4096 {
		t.Fatalf("160 commits: %+v", c)
	}
	if c.IndexHits+c.IndexMisses == 0 {
		t.Fatalf("20 reads, no index lookup counted: %+v", c)
	}
	t.Logf("160 commits in %d synced log writes (%.1f a write)", c.LogWrites, float64(c.LogCommits)/float64(c.LogWrites))
}
