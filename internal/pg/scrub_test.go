package pg

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestChoose(t *testing.T) {
	v := func(e, n uint64) ObjState { return ObjState{Ver: EVersion{e, n}, Size: 10, Meta: 1} }
	bad := ObjState{Ver: EVersion{9, 9}, Deep: true, Corrupt: true}
	for _, c := range []struct {
		name       string
		copies     []Copy
		good       []int
		consistent bool
		ok         bool
	}{
		{"all agree", []Copy{{true, v(1, 2)}, {true, v(1, 2)}, {true, v(1, 2)}}, []int{0, 1, 2}, true, true},
		{"majority wins over newer", []Copy{{true, v(1, 3)}, {true, v(1, 2)}, {true, v(1, 2)}}, []int{1, 2}, false, true},
		{"tie goes to newer", []Copy{{true, v(1, 2)}, {true, v(1, 3)}}, []int{1}, false, true},
		{"tie of equals goes to the primary", []Copy{{true, ObjState{Ver: EVersion{1, 2}, Meta: 7}}, {true, v(1, 2)}}, []int{0}, false, true},
		{"a corrupt copy never counts", []Copy{{true, bad}, {true, bad}, {true, v(1, 1)}}, []int{2}, false, true},
		{"absent is a copy too (a delete)", []Copy{{false, ObjState{}}, {false, ObjState{}}, {true, v(1, 5)}}, []int{0, 1}, false, true},
		{"no good copy", []Copy{{true, bad}, {true, bad}}, nil, false, false},
	} {
		good, consistent, ok := Choose(c.copies)
		if !slices.Equal(good, c.good) || consistent != c.consistent || ok != c.ok {
			t.Errorf("%s: Choose = %v, %v, %v; want %v, %v, %v", c.name, good, consistent, ok, c.good, c.consistent, c.ok)
		}
	}
}

// Over random copies: the chosen group is never corrupt, all its members
// are equal, and no other group has more members.
func TestChooseProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 50000; i++ {
		copies := make([]Copy, 1+r.IntN(5))
		for j := range copies {
			copies[j] = Copy{Present: r.IntN(4) > 0, State: ObjState{Ver: EVersion{1, uint64(r.IntN(3))}, Size: 1, Corrupt: r.IntN(5) == 0}}
			if !copies[j].Present {
				copies[j].State = ObjState{}
			}
		}
		good, _, ok := Choose(copies)
		if !ok {
			for _, c := range copies {
				if !c.Present || !c.State.Corrupt {
					t.Fatalf("%+v: a good copy exists, Choose found none", copies)
				}
			}
			continue
		}
		first := copies[good[0]]
		for _, g := range good {
			c := copies[g]
			if c.Present && c.State.Corrupt || c.Present != first.Present || c.Present && !SameCopy(c.State, first.State) {
				t.Fatalf("%+v: chose %v, which are not all good and equal", copies, good)
			}
		}
		for j, c := range copies {
			if c.Present && c.State.Corrupt {
				continue
			}
			n := 0
			for _, d := range copies {
				if d.Present == c.Present && (!c.Present || SameCopy(c.State, d.State)) {
					n++
				}
			}
			if n > len(good) {
				t.Fatalf("%+v: chose %v, but copy %d has %d equals", copies, good, j, n)
			}
		}
	}
}

func TestBadShards(t *testing.T) {
	// Shards of one version differ in length and data digest, never in keys.
	v := func(n uint64, size uint64) ObjState {
		return ObjState{Ver: EVersion{1, n}, Size: size, Data: size * 7, Meta: 3}
	}
	rot := ObjState{Ver: EVersion{1, 2}, Deep: true, Corrupt: true}
	partial := v(3, 8)
	partial.Held = []PosVer{{1, EVersion{1, 2}}}
	for _, c := range []struct {
		name   string
		k      int
		copies []Copy
		bad    []int
		ok     bool
	}{
		{"all agree, lengths differ", 2, []Copy{{true, v(2, 8)}, {true, v(2, 8)}, {true, v(2, 4)}}, nil, true},
		{"a corrupt shard", 2, []Copy{{true, v(2, 8)}, {true, rot}, {true, v(2, 8)}}, []int{1}, true},
		{"an older shard", 2, []Copy{{true, v(2, 8)}, {true, v(1, 8)}, {true, v(2, 8)}}, []int{1}, true},
		{"a missing shard", 2, []Copy{{false, ObjState{}}, {true, v(2, 8)}, {true, v(2, 8)}}, []int{0}, true},
		{"other keys", 2, []Copy{{true, v(2, 8)}, {true, v(2, 8)}, {true, ObjState{Ver: EVersion{1, 2}, Meta: 4}}}, []int{2}, true},
		{"a tie goes to the newer", 1, []Copy{{true, v(1, 8)}, {true, v(2, 8)}}, []int{0}, true},
		{"too few to rebuild from", 2, []Copy{{true, v(2, 8)}, {true, rot}, {true, rot}}, []int{1, 2}, false},
		{"no shard left", 2, []Copy{{true, rot}, {true, rot}, {true, rot}}, nil, false},
		{"stray shards of an absent object", 2, []Copy{{false, ObjState{}}, {false, ObjState{}}, {true, v(2, 8)}}, []int{2}, true},
		// 3 wrote positions 0 and 2, and skipped 1, which holds 2.
		{"a position a partial write skipped", 2, []Copy{{true, partial}, {true, v(2, 8)}, {true, partial}}, nil, true},
		{"a position a partial write skipped, at an older version than it names", 2, []Copy{{true, partial}, {true, v(1, 8)}, {true, partial}}, []int{1}, true},
		// 3 reached the parity alone: it does not stand, though the
		// position it skipped holds what it names.
		{"a partial write on the parity alone is the bad shard", 2, []Copy{{true, v(2, 8)}, {true, v(2, 8)}, {true, partial}}, []int{2}, true},
	} {
		bad, ok := BadShards(c.k, c.copies)
		if !slices.Equal(bad, c.bad) || ok != c.ok {
			t.Errorf("%s: BadShards = %v, %v; want %v, %v", c.name, bad, ok, c.bad, c.ok)
		}
	}
	lists := func(sts ...ObjState) []*Listing {
		var out []*Listing
		for _, st := range sts {
			out = append(out, &Listing{Objs: map[string]ObjState{"o": st}})
		}
		return out
	}
	if !ShardsConsistent(lists(v(2, 8), v(2, 8), v(2, 4)), "o") {
		t.Error("shards of one version with other lengths: inconsistent")
	}
	if ShardsConsistent(lists(v(2, 8), rot, v(2, 4)), "o") || ShardsConsistent(lists(v(2, 8), v(1, 8), v(2, 4)), "o") ||
		ShardsConsistent(append(lists(v(2, 8), v(2, 8)), &Listing{Objs: map[string]ObjState{}}), "o") {
		t.Error("a corrupt, older or missing shard: consistent")
	}
	if !ShardsConsistent(lists(partial, v(2, 8), partial), "o") || ShardsConsistent(lists(partial, v(1, 8), partial), "o") {
		t.Error("the position a partial write skipped: consistent only when it holds what the write names")
	}
}
