package pg

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// Peering: whenever the acting set of a PG changes, its primary compares
// the copies (object names and eversions) of every acting member and of the
// OSDs the PG's record names as complete, picks an authoritative copy from
// the latter, and goes active with the list of objects each member lacks.
// Until then the PG serves nothing. Recovery then copies those objects in
// the background; an operation on an object that some member still lacks
// copies it first. So a member that missed writes never serves them stale,
// and no acknowledged write is rolled back:
//
//   - a write is acknowledged only when every member of the write set (the
//     acting set, plus the authoritative copy while it is not in the acting
//     set) applied it;
//   - the record's Complete list holds only OSDs that hold every
//     acknowledged write (the authoritative copy and members with nothing
//     missing), and is written before the PG goes active;
//   - a primary may go active only after it heard from a member of Complete.

// Listing is one OSD's copy of a PG, as peering sees it.
type Listing struct {
	Objs       map[string]ObjState
	LastUpdate uint64 // the PG version the OSD reported
}

// Applied is the highest PG version the copy is known to have applied: the
// one its OSD reported, or a newer one left on an object (an OSD that
// restarted knows only its newest delete's).
func (l *Listing) Applied() uint64 {
	v := l.LastUpdate
	for _, st := range l.Objs {
		v = max(v, st.Ver.Version)
	}
	return v
}

// Peered is the outcome of peering: the primary's state for the interval,
// and the highest PG version any listed copy has applied, which the new
// primary's versions continue from.
type Peered struct {
	Primary
	LastUpdate uint64
	// Erasure-coded PGs only (DecideShardsPG): the rollbacks each OSD
	// must carry out before the PG goes active, and the objects whose
	// rollback state every position may drop once the PG is clean.
	RollBacks map[clustermap.OSDID][]ShardRollBack
	Trims     []ShardTrim
}

// Decide is the heart of peering: given the PG's record and the copies that
// answered, it picks the authoritative copy (the newest among those the
// record names complete), the objects each acting member lacks, the
// members complete already, and the write set. It fails, naming what it
// waits for, when no copy the record names complete answered.
func Decide(self clustermap.OSDID, epoch clustermap.Epoch, acting []clustermap.OSDID, rec *Record, lists map[clustermap.OSDID]*Listing) (Peered, error) {
	res := Peered{}
	res.Acting, res.Epoch = acting, epoch
	candidates, err := candidates(acting, rec, lists)
	if err != nil {
		return res, err
	}
	applied := make(map[clustermap.OSDID]uint64, len(lists)) // each a pass over the copy's objects
	for o, l := range lists {
		applied[o] = l.Applied()
		res.LastUpdate = max(res.LastUpdate, applied[o])
	}
	auth := candidates[0]
	for _, o := range candidates {
		if lo, la := applied[o], applied[auth]; lo > la || lo == la && o == self {
			auth = o
		}
	}
	res.Auth = auth
	res.Missing = map[clustermap.OSDID]map[string]struct{}{}
	res.Complete = []clustermap.OSDID{auth}
	ref := lists[auth].Objs
	for _, o := range acting {
		if o == auth {
			continue
		}
		if miss := DiffCopies(ref, lists[o].Objs); len(miss) > 0 {
			res.Missing[o] = miss
		} else {
			res.Complete = append(res.Complete, o)
		}
	}
	res.WriteSet = slices.Clone(acting)
	if !slices.Contains(acting, auth) {
		res.WriteSet = append(res.WriteSet, auth)
	}
	return res, nil
}

// candidates returns the copies that may be authoritative: those the record
// names complete that answered, or, for a PG never recorded, the acting
// members that answered.
func candidates(acting []clustermap.OSDID, rec *Record, lists map[clustermap.OSDID]*Listing) ([]clustermap.OSDID, error) {
	var out []clustermap.OSDID
	if rec != nil && len(rec.Complete) > 0 {
		for _, o := range rec.Complete {
			if lists[o] != nil {
				out = append(out, o)
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("waiting for %s, which hold(s) the newest writes", OSDList(rec.Complete))
		}
		return out, nil
	}
	for _, o := range acting {
		if lists[o] != nil {
			out = append(out, o)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no copy answered")
	}
	return out, nil
}

// DiffCopies returns the names whose copy in have differs from ref, or
// exists in only one of them.
func DiffCopies(ref, have map[string]ObjState) map[string]struct{} {
	out := map[string]struct{}{}
	for n, a := range ref {
		b, ok := have[n]
		if !ok || a.Ver != b.Ver || a.Size != b.Size || a.Meta != b.Meta {
			out[n] = struct{}{}
		}
	}
	for n := range have {
		if _, ok := ref[n]; !ok {
			out[n] = struct{}{}
		}
	}
	return out
}

// OSDList renders ids as "osd.1, osd.4".
func OSDList(ids []clustermap.OSDID) string {
	s := make([]string, len(ids))
	for i, o := range ids {
		s[i] = o.String()
	}
	return strings.Join(s, ", ")
}
