package mapview

import (
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// Maps offered at once, in any order, leave the view at the newest, and
// its hooks see the epochs only rise.
func TestOffersAtOnceNeverGoBack(t *testing.T) {
	v := Static(&clustermap.Map{FSID: "f", Epoch: 1})
	var mu sync.Mutex
	last := clustermap.Epoch(1)
	v.OnMap(func(m *clustermap.Map) {
		mu.Lock()
		defer mu.Unlock()
		if m.Epoch <= last {
			t.Errorf("a hook saw epoch %d after %d", m.Epoch, last)
		}
		last = m.Epoch
	})
	epochs := rand.Perm(400)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < len(epochs); i += 8 {
				v.Offer(&clustermap.Map{FSID: "f", Epoch: clustermap.Epoch(epochs[i] + 2)})
			}
		})
	}
	wg.Wait()
	if v.Epoch() != 401 {
		t.Fatalf("the view is at epoch %d, want 401", v.Epoch())
	}
}
