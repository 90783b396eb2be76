package s3gw

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestFill fills a bucket whose shards split every few dozen keys, on top
// of keys PUT before, and checks that every object reads back through S3,
// listings match the oracle, shards split as PUTs would have split them,
// and bad fills are refused with what is wrong.
func TestFill(t *testing.T) {
	env := newSplitEnv(t, 40)
	ctx := context.Background()
	keys := awkwardKeys(400, 7)
	for _, k := range keys[:20] {
		env.put("lst", k, []byte("put"))
	}
	err := env.gw.Fill(ctx, "lst", keys[10:30], []byte("x"), nil)
	if err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("a fill over a key PUT before: %v, want it refused", err)
	}
	rest := slices.Clone(keys[20:])
	slices.Reverse(rest) // Fill takes keys in any order
	var seen []int
	if err := env.gw.Fill(ctx, "lst", rest, []byte("x"), func(n int) { seen = append(seen, n) }); err != nil {
		t.Fatal(err)
	}
	if len(seen) < 2 || seen[len(seen)-1] != len(rest) || !slices.IsSorted(seen) {
		t.Fatalf("progress %v, want rising to %d", seen, len(rest))
	}
	for i, k := range keys {
		want := "x"
		if i < 20 {
			want = "put"
		}
		if got := env.get("lst", k); string(got) != want {
			t.Fatalf("get %q: %q, want %q", k, got, want)
		}
	}
	env.gw.buckets.drop("lst")
	b, _ := env.gw.lookupBucket(ctx, "lst")
	if len(b.Shards) < 8 {
		t.Fatalf("the fill left 400 keys in %d shards, with shards of at most 40", len(b.Shards))
	}
	for _, r := range b.Shards {
		kvs, _, _ := env.store.OmapList(ctx, shardObject(b.ID, r.N), "\x01", afterMarker, 1000)
		if len(kvs) > 40+40/probeDivisor {
			t.Fatalf("the fill left %d keys in shard %d, over the bound of 40 and one batch", len(kvs), r.N)
		}
	}
	checkShards(t, env, env.settleSplits("lst"))
	for _, delim := range []string{"", "/"} {
		want := oracleList(keys, "", delim, "")
		if got := env.listAll(t, true, "", delim, "", 7); !slices.Equal(got, want) {
			t.Fatalf("delimiter %q over %d shards:\n got %v\nwant %v", delim, len(b.Shards), got, want)
		}
	}
}

// TestFillRefuses checks that a fill of bad input names the problem and
// writes nothing.
func TestFillRefuses(t *testing.T) {
	env := newEnv(t)
	env.mkBucket(env.alice, "lst")
	ctx := context.Background()
	for _, c := range []struct {
		bucket string
		keys   []string
		body   []byte
		want   string
	}{
		{"lst", []string{"a", "b", "a"}, nil, "given twice"},
		{"lst", []string{"a", ""}, nil, `key ""`},
		{"lst", []string{"a", "b\x00"}, nil, "NUL"},
		{"lst", []string{strings.Repeat("k", maxKeyBytes+1)}, nil, "1025 bytes"},
		{"lst", []string{"a"}, make([]byte, inlineMax+1), "at most"},
	} {
		err := env.gw.Fill(ctx, c.bucket, c.keys, c.body, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("fill %q: %v, want an error saying %q", c.keys, err, c.want)
		}
	}
	if err := env.gw.Fill(ctx, "nobucket", []string{"a"}, nil, nil); !errors.Is(err, ErrNoSuchBucket) {
		t.Fatalf("fill of a missing bucket: %v", err)
	}
	if got := env.listAll(t, true, "", "", "", 1000); len(got) != 0 {
		t.Fatalf("refused fills wrote %v", got)
	}
}

// TestFillFollowsSplits fills through a gateway whose cached record of the
// bucket is older than splits another gateway made: its batches fail their
// guard, and it follows the record to the shards there are now.
func TestFillFollowsSplits(t *testing.T) {
	env := newSplitEnv(t, 40)
	ctx := context.Background()
	other := New(Config{Store: env.store, IndexShardKeys: 1 << 20})
	if b, err := other.lookupBucket(ctx, "lst"); err != nil || len(b.Shards) != 1 {
		t.Fatalf("bucket record: %v %v", b, err)
	}
	keys := awkwardKeys(300, 11)
	for _, k := range keys[:200] {
		env.put("lst", k, []byte("put"))
	}
	if b := env.settleSplits("lst"); len(b.Shards) < 4 {
		t.Fatalf("200 keys made %d shards", len(b.Shards))
	}
	if err := other.Fill(ctx, "lst", keys[200:], []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	checkShards(t, env, env.settleSplits("lst"))
	if got, want := env.listAll(t, true, "", "", "", 1000), oracleList(keys, "", "", ""); !slices.Equal(got, want) {
		t.Fatalf("after a fill on a stale record:\n got %v\nwant %v", got, want)
	}
}
