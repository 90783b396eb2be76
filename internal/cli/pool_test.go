package cli

import (
	"strings"
	"testing"

	"github.com/cairn-storage/cairn/client"
)

// pool ls shows an erasure-coded pool's stripe unit next to its code.
func TestPoolListShowsStripeUnit(t *testing.T) {
	var b strings.Builder
	pools := []client.PoolInfo{{ID: 1, Name: "vols", EC: "2+1", StripeUnit: 16 << 10}, {ID: 2, Name: "s3ec", EC: "2+2", StripeUnit: 1 << 20}, {ID: 3, Name: "rep", Size: 3}}
	if err := printPools(&b, pools, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"vols  ec 2+1 16K", "s3ec  ec 2+2 1M", "rep   replicated"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("pool ls lacks %q:\n%s", want, b.String())
		}
	}
}
