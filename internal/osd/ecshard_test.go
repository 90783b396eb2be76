package osd

import (
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// Shard collections are told apart from PG collections and from each
// other, so strays and listings never take one for the other.
func TestShardColl(t *testing.T) {
	id := clustermap.PGID{Pool: 3, Seed: 0x2a}
	if c := shardColl(id, 1); c != "3.2as1" {
		t.Fatalf("shardColl = %q", c)
	}
	if got, pos, ok := parseShardColl("3.2as1"); !ok || got != id || pos != 1 {
		t.Fatalf("parseShardColl(3.2as1) = %v %d %v", got, pos, ok)
	}
	for _, bad := range []string{"3.2a", "3.2as", "3.2as-1", "3.2as01", "3.2as1x", "s1", "x.2as1", "3.2as+1"} {
		if _, _, ok := parseShardColl(bad); ok {
			t.Errorf("parseShardColl(%q) accepted it", bad)
		}
	}
	if _, err := clustermap.ParsePGID("3.2as1"); err == nil {
		t.Fatal("a shard collection parses as a PG id: strays would take it for a PG")
	}
}

// FuzzParseShardColl: collection names come from the disk; a name
// accepted is exactly the one shardColl writes.
func FuzzParseShardColl(f *testing.F) {
	f.Add("3.2as1")
	f.Add("1.0s0")
	f.Add("7.ffs12")
	f.Fuzz(func(t *testing.T, coll string) {
		id, pos, ok := parseShardColl(coll)
		if ok && shardColl(id, pos) != coll {
			t.Fatalf("%q parsed as %v position %d, which is named %q", coll, id, pos, shardColl(id, pos))
		}
	})
}
