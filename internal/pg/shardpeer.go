package pg

import (
	"slices"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// Peering of an erasure-coded PG. Its record (Record.Positions) names the
// OSD of each position of the acting set it last went active with, and
// Complete the OSDs among them whose positions hold every acknowledged
// write. A position is complete only as that OSD at that position: its
// shards live in the position's own collection. Every other position —
// its OSD was down while writes went on, or it is new after an out — is
// stale: DecideShards counts no vote of it, so what it missed (a newer
// version, or a delete: the object's absence on K complete positions is
// a version too) is rebuilt on it and never read from it.

// DecideShardsPG peers an erasure-coded PG of k data shards: positions
// holds the OSD of each position of the new acting set (a negative id in a
// hole), lists the listing of each position (nil where it did not answer),
// rec the PG's record (nil: never recorded, every listed position votes).
// The outcome's Missing is by OSD: the shards each position must have
// rebuilt (or deleted); Unfound the objects with no version on k voting
// positions, never served. It fails, naming what it waits for, when fewer
// than k positions the record names complete answer.
func DecideShardsPG(self clustermap.OSDID, epoch clustermap.Epoch, k int, positions []clustermap.OSDID, rec *Record, lists []*Listing) (Peered, error) {
	res := Peered{}
	res.Epoch, res.Auth, res.Positions = epoch, self, slices.Clone(positions)
	for p, o := range positions {
		if o >= 0 && lists[p] != nil {
			res.Acting = append(res.Acting, o)
			res.LastUpdate = max(res.LastUpdate, lists[p].Applied())
		}
	}
	res.WriteSet = slices.Clone(res.Acting)
	voter := votingPositions(positions, rec, lists)
	if rec != nil && len(rec.Positions) > 0 {
		var last []int
		for p, o := range rec.Positions {
			if o >= 0 && slices.Contains(rec.Complete, o) {
				last = append(last, p)
			}
		}
		if err := ShardsPeerable(k, last, func(p int) bool { return p < len(voter) && voter[p] }); err != nil {
			return res, err
		}
	}
	res.Missing = map[clustermap.OSDID]map[string]struct{}{}
	res.Unfound = map[string]struct{}{}
	for _, name := range shardNames(lists) {
		copies := make([]ShardCopy, len(positions))
		for p, l := range lists {
			if l != nil && positions[p] >= 0 {
				copies[p] = ShardCopy{Listed: true, Ver: l.Objs[name].Ver, Stale: !voter[p]}
			}
		}
		plan := DecideShards(k, copies)
		if plan.Unfound {
			res.Unfound[name] = struct{}{}
			continue
		}
		for _, p := range append(plan.Rebuild, plan.RollBack...) {
			o := positions[p]
			if res.Missing[o] == nil {
				res.Missing[o] = map[string]struct{}{}
			}
			res.Missing[o][name] = struct{}{}
		}
	}
	for p, o := range positions {
		// With objects unfound, only voters count complete: a stale
		// position's lack of them must not vote them away next time.
		if o >= 0 && lists[p] != nil && len(res.Missing[o]) == 0 && (voter[p] || len(res.Unfound) == 0) {
			res.Complete = append(res.Complete, o)
		}
	}
	return res, nil
}

// votingPositions says which listed positions vote: all of them for a PG
// never recorded (or recorded before records named positions), else those
// whose OSD the record names complete at that same position.
func votingPositions(positions []clustermap.OSDID, rec *Record, lists []*Listing) []bool {
	voter := make([]bool, len(positions))
	for p, o := range positions {
		if o < 0 || lists[p] == nil {
			continue
		}
		voter[p] = rec == nil || len(rec.Positions) == 0 ||
			p < len(rec.Positions) && rec.Positions[p] == o && slices.Contains(rec.Complete, o)
	}
	return voter
}

// shardNames returns every object name any listing holds, sorted.
func shardNames(lists []*Listing) []string {
	seen := map[string]struct{}{}
	var out []string
	for _, l := range lists {
		if l == nil {
			continue
		}
		for n := range l.Objs {
			if _, ok := seen[n]; !ok {
				seen[n] = struct{}{}
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return out
}
