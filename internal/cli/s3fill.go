package cli

// `cairn s3 bucket fill`: many small objects in a bucket at once
// (s3gw.Gateway.Fill), to try listings and tools on a bucket of tens of
// millions of keys without hours of PUTs.

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cairn-storage/cairn/internal/s3gw"
)

// fillChunk bounds the keys one call of Fill holds in memory.
const fillChunk = 100000

type s3Fill struct {
	pool, prefix    string
	first, objects  int
	size, shardKeys int
}

func s3BucketFillCmd(g *globals) *cobra.Command {
	var o s3Fill
	cmd := &cobra.Command{
		Use:   "fill BUCKET --objects N",
		Short: "write N small test objects into a bucket, a thousand per index transaction",
		Long: `Writes objects PREFIX/00000000, PREFIX/00000001, … (numbered from --first, eight digits
or more) of --size bytes each into BUCKET, committed a batch per index shard transaction where a
PUT commits one: a bucket of ten million keys fills in minutes. Shards split as PUTs would split
them. It refuses to overwrite: a key that exists stops the fill. That check runs just before
each batch commits, not inside its transaction, so fill buckets nothing else writes to: an
object PUT to one of the keys meanwhile would be replaced and its data never collected.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, g, args[0]) },
	}
	f := cmd.Flags()
	f.StringVar(&o.pool, "pool", "s3", "the gateway's pool")
	f.StringVar(&o.prefix, "prefix", "obj", "key prefix")
	f.IntVar(&o.first, "first", 0, "the number of the first object")
	f.IntVar(&o.objects, "objects", 0, "how many objects to write")
	f.IntVar(&o.size, "size", 1, "bytes per object (at most 16 KiB: kept in the index)")
	f.IntVar(&o.shardKeys, "index-shard-keys", 0, "the gateways' --index-shard-keys (0: 50000)")
	return cmd
}

func (o s3Fill) run(cmd *cobra.Command, g *globals, bucket string) error {
	if o.objects <= 0 || o.first < 0 || o.size < 0 {
		return fmt.Errorf("s3: fill needs --objects above 0, and --first and --size not negative")
	}
	st, done, err := g.s3Store(cmd.Context(), o.pool)
	if err != nil {
		return err
	}
	defer done()
	gw := s3gw.New(s3gw.Config{Store: st, IndexShardKeys: o.shardKeys})
	body, start, last := []byte(strings.Repeat("x", o.size)), time.Now(), time.Now()
	for at := 0; at < o.objects; at += fillChunk {
		keys := make([]string, min(fillChunk, o.objects-at))
		for i := range keys {
			keys[i] = fmt.Sprintf("%s/%08d", o.prefix, o.first+at+i)
		}
		err := gw.Fill(cmd.Context(), bucket, keys, body, func(n int) {
			if time.Since(last) >= 5*time.Second {
				last = time.Now()
				fmt.Fprintf(g.err, "s3: filled %d of %d objects (%.0f/s)\n", at+n, o.objects, float64(at+n)/time.Since(start).Seconds())
			}
		})
		if errors.Is(err, s3gw.ErrNoSuchBucket) {
			return fmt.Errorf("s3: bucket %q does not exist in pool %q (cairn s3 bucket ls lists them)", bucket, o.pool)
		}
		if err != nil {
			return fmt.Errorf("s3: %w (every object before %s/%08d is written, and some after it may be)", err, o.prefix, o.first+at)
		}
	}
	fmt.Fprintf(g.out, "filled %d objects into bucket %s in %.1f s\n", o.objects, bucket, time.Since(start).Seconds())
	return nil
}
