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

// ShardRollBack is a rollback peering decided: an OSD's shard of Name,
// whose newest write is Ver, goes back to To (zero: the shard goes, which
// also stands for a tombstone).
type ShardRollBack struct {
	Name    string
	Ver, To EVersion
}

// ShardTrim names an object whose standing version Ver every position
// holds, some still with what it needs to roll back: once the PG is clean
// (every position holds every object), that state may go.
type ShardTrim struct {
	Name string
	Ver  EVersion
}

// DecideShardsPG peers an erasure-coded PG of k data shards: positions
// holds the OSD of each position of the new acting set (a negative id in a
// hole), lists the listing of each position (nil where it did not answer),
// rec the PG's record (nil: never recorded, every listed position votes).
// The outcome's Missing is by OSD: the shards each position must have
// rebuilt (or deleted); RollBacks the shards each must roll back, which
// the caller carries out before the PG goes active (a rollback stays on
// its OSD, no data moves, and it is bounded by the writes in flight when
// the last interval ended): so such a position holds the standing version
// and is complete, and no later write keeps a version that does not stand
// as its own rollback state. Unfound are the objects with no version on k
// voting positions, never served; Trims the objects whose rollback state
// may go once the PG is clean. It fails, naming what it waits for, when
// fewer than k positions the record names complete answer.
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
	res.RollBacks = map[clustermap.OSDID][]ShardRollBack{}
	for _, name := range shardNames(lists) {
		copies := make([]ShardCopy, len(positions))
		for p, l := range lists {
			if l != nil && positions[p] >= 0 {
				copies[p] = l.Objs[name].shard().Copy()
				copies[p].Stale = !voter[p]
			}
		}
		plan := DecideShards(k, copies)
		if plan.Unfound {
			res.Unfound[name] = struct{}{}
			continue
		}
		res.notePlan(name, plan, positions, copies)
	}
	for p, o := range positions {
		// With objects unfound, only voters count complete: a stale
		// position's lack of them must not vote them away next time.
		if o >= 0 && lists[p] != nil && len(res.Missing[o]) == 0 && (voter[p] || len(res.Unfound) == 0) {
			res.Complete = append(res.Complete, o)
		}
	}
	res.Sources = BackfillSources(rec, positions, res.Complete)
	return res, nil
}

// BackfillSources names, for each position of positions (the OSD of each
// position of the new acting set, negative in a hole) whose OSD is not in
// complete, an OSD that still holds that position's shards as of the last
// record: the OSD the record put there, if another and complete, or else
// the source the record kept for it. Its shards at the version that stands
// are the ones the position needs, so recovery copies them instead of
// rebuilding them from K positions; the OSD keeps its collection of the
// position until the PG is whole (its stray). nil when no position has one.
func BackfillSources(rec *Record, positions, complete []clustermap.OSDID) []clustermap.OSDID {
	if rec == nil {
		return nil
	}
	var out []clustermap.OSDID
	for p, o := range positions {
		src := clustermap.OSDID(-1)
		switch {
		case o < 0 || slices.Contains(complete, o):
		case p < len(rec.Positions) && rec.Positions[p] >= 0 && rec.Positions[p] != o && slices.Contains(rec.Complete, rec.Positions[p]):
			src = rec.Positions[p]
		case p < len(rec.Sources) && rec.Sources[p] != o:
			src = rec.Sources[p]
		}
		if src >= 0 && out == nil {
			out = make([]clustermap.OSDID, len(positions))
			for i := range out {
				out[i] = -1
			}
		}
		if out != nil {
			out[p] = src
		}
	}
	return out
}

// notePlan records what one object's plan leaves to do.
func (res *Peered) notePlan(name string, plan ShardPlan, positions []clustermap.OSDID, copies []ShardCopy) {
	for _, p := range plan.Rebuild {
		o := positions[p]
		if res.Missing[o] == nil {
			res.Missing[o] = map[string]struct{}{}
		}
		res.Missing[o][name] = struct{}{}
	}
	for _, p := range plan.RollBack {
		o := positions[p]
		res.RollBacks[o] = append(res.RollBacks[o], ShardRollBack{Name: name, Ver: copies[p].Ver, To: copies[p].Prev})
	}
	for _, p := range plan.Keep {
		if copies[p].CanRollBack || copies[p].Tombstone {
			res.Trims = append(res.Trims, ShardTrim{Name: name, Ver: plan.Ver})
			break
		}
	}
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
