package pg

import (
	"slices"
	"sort"
)

// Copy is one member's copy of an object as scrub read it under the
// object's lock: absent (a delete counts as a copy too), or its state.
type Copy struct {
	Present bool
	State   ObjState
}

// Choose picks the copy scrub repairs the others from: the group of equal
// copies most members hold; a copy failing its checksums never counts;
// ties go to the newer eversion, then to the group holding the earliest
// member (the primary's copy first). It returns the members of that
// group, whether every copy agrees (nothing to repair: a write raced the
// listing), and false if no copy passes its checksums.
func Choose(copies []Copy) (good []int, consistent, ok bool) {
	type group struct {
		members []int
		ver     EVersion
	}
	var groups []*group
	same := func(a, b Copy) bool {
		return a.Present == b.Present && (!a.Present || SameCopy(a.State, b.State))
	}
	for i, c := range copies {
		if c.Present && c.State.Corrupt {
			continue
		}
		placed := false
		for _, g := range groups {
			if same(copies[g.members[0]], c) {
				g.members = append(g.members, i)
				placed = true
				break
			}
		}
		if !placed {
			groups = append(groups, &group{members: []int{i}, ver: c.State.Ver})
		}
	}
	if len(groups) == 0 {
		return nil, false, false
	}
	if len(groups) == 1 && len(groups[0].members) == len(copies) {
		return groups[0].members, true, true
	}
	sort.SliceStable(groups, func(a, b int) bool {
		ga, gb := groups[a], groups[b]
		if len(ga.members) != len(gb.members) {
			return len(ga.members) > len(gb.members)
		}
		if ga.ver != gb.ver {
			return gb.ver.Less(ga.ver)
		}
		return ga.members[0] < gb.members[0]
	})
	return groups[0].members, false, true
}

// Consistent reports whether every listing holds the same copy of name (or
// none does), with no copy failing its checksums: then scrub need not look
// closer.
func Consistent(lists []*Listing, name string) bool {
	first, ok0 := lists[0].Objs[name]
	for _, l := range lists[1:] {
		st, ok := l.Objs[name]
		if ok != ok0 || ok && !SameCopy(first, st) {
			return false
		}
	}
	return !ok0 || !first.Corrupt
}

// sameShardCopy reports whether two positions hold the same version of an
// erasure-coded object: both absent, or at one version, both tombstones
// or neither, with the same keys. Lengths and data digests differ by
// position and are not compared.
func sameShardCopy(a, b Copy) bool {
	return a.Present == b.Present && (!a.Present ||
		a.State.Ver == b.State.Ver && a.State.Meta == b.State.Meta && a.State.Tombstone == b.State.Tombstone)
}

// ShardsConsistent is Consistent for the positions of an erasure-coded
// PG: every position holds the same version of name (or none holds it),
// none failing its checksums.
func ShardsConsistent(lists []*Listing, name string) bool {
	copies := make([]Copy, len(lists))
	for i, l := range lists {
		st, ok := l.Objs[name]
		if ok && st.Corrupt {
			return false
		}
		copies[i] = Copy{ok, st}
	}
	copies = ShardsAtNewest(copies)
	for _, c := range copies {
		if !sameShardCopy(copies[0], c) {
			return false
		}
	}
	return true
}

// ShardsAtNewest returns copies (by position) with each shard that holds
// what the newest version among them names for its position taken as at
// that version: a partial write skips positions (shardheld.go), whose
// shards are then older by their own version but hold the newest
// version's bytes. Scrub compares what the positions hold, so it compares
// them that way: all of them at the newest is all of them agreeing.
func ShardsAtNewest(copies []Copy) []Copy {
	var v EVersion
	for _, c := range copies {
		if c.Present && !c.State.Corrupt && v.Less(c.State.Ver) {
			v = c.State.Ver
		}
	}
	return shardsAt(copies, v)
}

// shardsAt is ShardsAtNewest for version v.
func shardsAt(copies []Copy, v EVersion) []Copy {
	o := objVersion{ver: v}
	for _, c := range copies {
		if c.Present && !c.State.Corrupt && c.State.Ver == v && len(c.State.Held) > 0 {
			o.held = c.State.Held
			break
		}
	}
	out := slices.Clone(copies)
	for i, c := range out {
		st := c.State
		if !c.Present || st.Corrupt || st.Ver == v || st.Tombstone || heldAt(st.Held, st.Ver, i) != heldAt(o.held, v, i) {
			continue
		}
		out[i].State.Ver, out[i].State.Held = v, o.held
	}
	return out
}

// shardsAtStanding is shardsAt for the version that stands among copies
// as peering decides it (a partial write that a data position it wrote
// lacks does not stand, whatever the positions it skipped hold), or the
// newest when none does.
func shardsAtStanding(k int, copies []Copy) []Copy {
	shards := make([]ShardCopy, len(copies))
	for i, c := range copies {
		if c.Present && c.State.Corrupt {
			continue // not listed: no vote
		}
		shards[i] = c.State.shard().Copy()
	}
	if v, ok := standing(k, shards); ok {
		return shardsAt(copies, v)
	}
	return ShardsAtNewest(copies)
}

// BadShards picks the positions of an erasure-coded object that scrub
// rebuilds from the others: those failing their checksums and those that
// differ from the group of equal shards most positions hold (ties go to
// the newer version, then to the group holding the earliest position). ok
// is false when that group is of fewer than k positions holding the
// object: too few to rebuild it from.
func BadShards(k int, copies []Copy) (bad []int, ok bool) {
	copies = shardsAtStanding(k, copies)
	var groups [][]int
	for i, c := range copies {
		if c.Present && c.State.Corrupt {
			continue
		}
		placed := false
		for g := range groups {
			if sameShardCopy(copies[groups[g][0]], c) {
				groups[g] = append(groups[g], i)
				placed = true
				break
			}
		}
		if !placed {
			groups = append(groups, []int{i})
		}
	}
	if len(groups) == 0 {
		return nil, false
	}
	sort.SliceStable(groups, func(a, b int) bool {
		ga, gb := groups[a], groups[b]
		if len(ga) != len(gb) {
			return len(ga) > len(gb)
		}
		if va, vb := copies[ga[0]].State.Ver, copies[gb[0]].State.Ver; va != vb {
			return vb.Less(va)
		}
		return ga[0] < gb[0]
	})
	best := groups[0]
	for i := range copies {
		if !slices.Contains(best, i) {
			bad = append(bad, i)
		}
	}
	return bad, !copies[best[0]].Present || len(best) >= k
}
