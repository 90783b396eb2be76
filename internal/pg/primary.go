package pg

import (
	"slices"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// Primary is what the primary of a PG knows for one interval, from peering
// on: which copy holds every acknowledged write, which members are
// complete, what each other member lacks. Recovery and client writes empty
// the missing sets; the record follows (AfterRecovery). The caller
// serialises access.
type Primary struct {
	Epoch    clustermap.Epoch // the interval: the map epoch peering ran at
	Acting   []clustermap.OSDID
	WriteSet []clustermap.OSDID // acting, plus Auth while it is not acting
	Auth     clustermap.OSDID   // holds every acknowledged write
	Complete []clustermap.OSDID
	Missing  map[clustermap.OSDID]map[string]struct{}
	// Positions, for an erasure-coded PG: the OSD of each position (-1 in
	// a hole), which its record keeps; Missing is then by the OSD of the
	// position that lacks a shard.
	Positions []clustermap.OSDID
	// Sources, for an erasure-coded PG: Record.Sources.
	Sources []clustermap.OSDID
	// Unfound, for an erasure-coded PG: objects no version of which is on
	// K positions that vote. They are never served, and while any is
	// left no member becomes complete after recovery.
	Unfound map[string]struct{}
	RecRev  int64  // the stored record's revision, for the next compare-and-swap
	Reason  string // why the PG cannot go active, when it cannot
}

// MissingCount counts the object copies members lack.
func (ps *Primary) MissingCount() int {
	n := 0
	for _, m := range ps.Missing {
		n += len(m)
	}
	return n
}

// IsMissing reports whether osd's copy of name is stale.
func (ps *Primary) IsMissing(osd clustermap.OSDID, name string) bool {
	_, ok := ps.Missing[osd][name]
	return ok
}

// SomeMissing returns up to n names some member lacks.
func (ps *Primary) SomeMissing(n int) []string {
	var names []string
	seen := map[string]bool{}
	for _, set := range ps.Missing {
		for name := range set {
			if len(names) >= n {
				return names
			}
			if !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		}
	}
	return names
}

// ClearMissing notes that osd now has name; it says whether osd lacked it.
func (ps *Primary) ClearMissing(osd clustermap.OSDID, name string) bool {
	set := ps.Missing[osd]
	if _, ok := set[name]; !ok {
		return false
	}
	delete(set, name)
	return true
}

// ClearMissingAll notes that every member agrees on name (it was deleted
// everywhere); it returns how many members lacked it.
func (ps *Primary) ClearMissingAll(name string) int {
	n := 0
	for _, set := range ps.Missing {
		if _, ok := set[name]; ok {
			delete(set, name)
			n++
		}
	}
	return n
}

// MarkMissing notes that osd's copy of name is stale (a write failed on
// it): osd is complete no more. It says whether name was not missing yet.
func (ps *Primary) MarkMissing(osd clustermap.OSDID, name string) bool {
	if ps.Missing == nil {
		ps.Missing = map[clustermap.OSDID]map[string]struct{}{}
	}
	set := ps.Missing[osd]
	if set == nil {
		set = map[string]struct{}{}
		ps.Missing[osd] = set
	}
	// A new slice: the old one may be shared with the record last written.
	ps.Complete = slices.DeleteFunc(slices.Clone(ps.Complete), func(o clustermap.OSDID) bool { return o == osd })
	if _, ok := set[name]; ok {
		return false
	}
	set[name] = struct{}{}
	return true
}

// RecordComplete reports whether the record names every acting member
// complete and nothing else (no stray authoritative copy left).
func (ps *Primary) RecordComplete() bool {
	return SameSet(ps.Complete, ps.Acting)
}

// AfterRecovery returns the complete list and write set once the members
// with nothing missing count as complete: when every acting member does,
// the authoritative copy outside the acting set is dropped from both.
func (ps *Primary) AfterRecovery() (complete, writeSet []clustermap.OSDID, allActing, changed bool) {
	complete = slices.Clone(ps.Complete)
	if len(ps.Unfound) > 0 {
		return complete, ps.WriteSet, false, false
	}
	for _, o := range ps.Acting {
		if len(ps.Missing[o]) == 0 && !slices.Contains(complete, o) {
			complete = append(complete, o)
			changed = true
		}
	}
	allActing = true
	for _, o := range ps.Acting {
		allActing = allActing && slices.Contains(complete, o)
	}
	writeSet = ps.WriteSet
	if allActing && !SameSet(complete, ps.Acting) {
		complete, writeSet, changed = slices.Clone(ps.Acting), slices.Clone(ps.Acting), true
	}
	return complete, writeSet, allActing, changed
}

// SameSet reports whether a and b hold the same OSDs.
func SameSet(a, b []clustermap.OSDID) bool {
	if len(a) != len(b) {
		return false
	}
	for _, o := range a {
		if !slices.Contains(b, o) {
			return false
		}
	}
	return true
}
