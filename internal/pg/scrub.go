package pg

import "sort"

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
