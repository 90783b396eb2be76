package osd

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cairn-storage/cairn/internal/objstore"
)

// BenchmarkListDelimPage times one S3-shaped listing page (up to 1,000
// items from a random position, without a delimiter and with "/", which
// rolls each directory into one prefix: a seek each) of an index omap
// holding 10⁴, 10⁵ and 10⁶ keys. What a page costs on a shard of a given
// size is what a bucket of any size costs, since s3gw splits its index
// shards at 50,000 keys.
func BenchmarkListDelimPage(b *testing.B) {
	for _, n := range []int{1e4, 1e5, 1e6} {
		for _, delim := range []string{"", "/"} {
			benchListDelim(b, n, delim)
		}
	}
}

func benchListDelim(b *testing.B, n int, delim string) {
	b.Run(fmt.Sprintf("keys=%d/delim=%q", n, delim), func(b *testing.B) {
		st, err := objstore.Open(objstore.Options{Dir: b.TempDir(), ReserveBytes: -1, DataCacheBytes: -1})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		fillIndex(b, st, n)
		r := rand.New(rand.NewPCG(1, 2))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			it, err := st.NewOmapIter("1.0", "idx")
			if err != nil {
				b.Fatal(err)
			}
			after := []byte(indexKey(r.IntN(n)))
			if l := listDelim(it, nil, []byte(delim), after, 1000, listDelimBytes); len(l.entries)+len(l.prefixes) == 0 && l.more {
				b.Fatal("an empty page with more to come")
			}
			it.Close()
		}
	})
}

// indexKey is key i of a bucket-like index: 100 directories of files.
func indexKey(i int) string { return fmt.Sprintf("dir%02d/sub%03d/file-%08d", i%100, i/100%1000, i) }

// fillIndex writes n keys with entry-sized values, 10,000 a transaction.
func fillIndex(b *testing.B, st *objstore.Store, n int) {
	val := make([]byte, 150)
	for i := 0; i < n; {
		var txn objstore.Txn
		for j := 0; j < 10000 && i < n; j, i = j+1, i+1 {
			txn.OmapSet("1.0", "idx", []byte(indexKey(i)), val)
		}
		if err := st.Apply(&txn); err != nil {
			b.Fatal(err)
		}
	}
}
