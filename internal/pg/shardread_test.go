package pg

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// randomShard draws the shard of position pos of a k-data-shard object
// among a few versions, with and without rollback state, and absence:
// version 1'2 is a delete, 2'4 and 2'5 partial writes (2'4 wrote data
// position 0 and the parity, 2'5 the last data position and the parity).
// A shard at a version that did not write its position was rebuilt
// there; only a shard its newest write reached can roll back.
func randomShard(r *rand.Rand, pos, k int) ShardCopy {
	vers := []EVersion{{}, {1, 1}, {1, 2}, {2, 3}, {2, 4}, {2, 5}}
	s := ShardCopy{Listed: r.IntN(8) != 0, Stale: r.IntN(10) == 0}
	i := r.IntN(len(vers))
	s.Ver, s.Held = vers[i], randomHeld(vers[i], k)
	if i > 0 && heldAt(s.Held, s.Ver, pos) == s.Ver && r.IntN(2) == 0 {
		s.CanRollBack, s.Prev = true, vers[r.IntN(i)]
		s.PrevHeld = randomHeld(s.Prev, k)
	}
	s.Tombstone = s.Ver == EVersion{1, 2}
	if !s.Listed {
		s = ShardCopy{}
	}
	return s
}

// randomHeld is the Held list of randomShard's version v.
func randomHeld(v EVersion, k int) []PosVer {
	var base []EVersion
	var wrote int
	switch v {
	case EVersion{2, 4}:
		base, wrote = slices.Repeat([]EVersion{{2, 3}}, k), 0
	case EVersion{2, 5}:
		base, wrote = slices.Repeat([]EVersion{{2, 3}}, k), k-1
		base[0] = EVersion{2, 4}
	default:
		return nil
	}
	return PartialHeld(base, []int{wrote})
}

// served is what a read serves under a plan: nothing for an unfound
// object, else the version if it is data (absent and tombstones alike).
func served(shards []ShardCopy, p ShardPlan) (EVersion, bool) {
	if p.Unfound {
		return EVersion{}, false
	}
	if versionOf(shards, p.Ver).tomb {
		return EVersion{}, true
	}
	return p.Ver, true
}

// TestDecideShardsPartAgreesWithAll checks DecideShardsPart against
// DecideShards with every position answering, over random shards: when the
// fast path calls its decision final, whatever the positions it did not
// ask hold, the full decision serves the same thing, and the fast path
// reads only shards the full decision keeps.
func TestDecideShardsPartAgreesWithAll(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 0xfa))
	final := 0
	for range 200000 {
		k, m := 1+r.IntN(4), 1+r.IntN(3)
		all := randomAnswers(r, k, k+m, 0)
		q := FastReadPositions(k, m)
		part := make([]ShardCopy, k+m)
		copy(part, all[:q])
		if r.IntN(4) == 0 {
			part[r.IntN(q)] = ShardCopy{} // an asked position did not answer
		}
		p, ok := DecideShardsPart(k, part)
		if !ok {
			continue
		}
		final++
		full := DecideShards(k, all)
		fv, fok := served(all, full)
		pv, pok := served(part, p)
		if fv != pv || fok != pok {
			t.Fatalf("%d+%d: the fast path serves %v (%v), every position %v (%v)\nasked %+v\nall %+v", k, m, pv, pok, fv, fok, part[:q], all)
		}
		for _, i := range p.Keep {
			if p.Ver != (EVersion{}) && !slices.Contains(full.Keep, i) {
				t.Fatalf("%d+%d: the fast path reads position %d at %v, the full decision %+v", k, m, i, all[i].Ver, full)
			}
		}
	}
	if final == 0 {
		t.Fatal("no case was final: the test checks nothing")
	}
}

// TestDecideShardsPartNeedsParityWhenKNotAboveM is the case the parity
// metas are for: 2+2, a write that reached only the two parity positions
// stands, though both data positions agree on the version before it.
func TestDecideShardsPartNeedsParityWhenKNotAboveM(t *testing.T) {
	old, newer := EVersion{1, 1}, EVersion{1, 2}
	data := ShardCopy{Listed: true, Ver: old}
	parity := ShardCopy{Listed: true, Ver: newer, Prev: old, CanRollBack: true}
	all := []ShardCopy{data, data, parity, parity}
	if got := DecideShards(2, all).Ver; got != newer {
		t.Fatalf("every position: %v stands, want %v", got, newer)
	}
	if _, ok := DecideShardsPart(2, []ShardCopy{data, data, {}, {}}); ok {
		t.Fatal("the data positions alone were taken as final on 2+2")
	}
	if FastReadPositions(2, 2) != 3 {
		t.Fatalf("FastReadPositions(2, 2) = %d, want 3", FastReadPositions(2, 2))
	}
	if _, ok := DecideShardsPart(2, []ShardCopy{data, data, parity, {}}); ok {
		t.Fatal("a disagreeing parity meta was taken as final")
	}
	if p, ok := DecideShardsPart(2, []ShardCopy{data, data, data, {}}); !ok || p.Ver != old {
		t.Fatalf("three agreeing positions of 2+2: %+v %v, want %v final", p, ok, old)
	}
	if _, ok := DecideShardsPart(2, []ShardCopy{data, {Listed: true, Stale: true, Ver: old}, {}}); ok {
		t.Fatal("a stale position was taken as a vote")
	}
}

// TestDecideSettledAgreesWithAll checks a client's decision to read from
// the positions against DecideShards over the same answers: whatever it
// serves, the full decision serves too, from every position, with nothing
// to roll back.
func TestDecideSettledAgreesWithAll(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 0x5e))
	served := 0
	for range 200000 {
		k, m := 1+r.IntN(4), 1+r.IntN(3)
		all := randomAnswers(r, k, k+m, 20)
		if r.IntN(2) == 0 { // often all alike, so that some are served
			for i := range all {
				all[i] = all[0]
			}
		}
		v, ok := DecideSettled(all)
		if !ok {
			continue
		}
		served++
		full := DecideShards(k, all)
		if full.Unfound || full.Ver != v || len(full.Keep) != k+m || len(full.RollBack) != 0 {
			t.Fatalf("%d+%d: a client would serve %v, every position decides %+v\nall %+v", k, m, v, full, all)
		}
	}
	if served == 0 {
		t.Fatal("no case was served: the test checks nothing")
	}
}

// randomAnswers is n positions' random shards, every one answering, or
// with oneIn > 0 one in oneIn not.
func randomAnswers(r *rand.Rand, k, n, oneIn int) []ShardCopy {
	all := make([]ShardCopy, n)
	for i := range all {
		all[i] = randomShard(r, i, k)
		all[i].Listed = oneIn == 0 || r.IntN(oneIn) != 0
	}
	return all
}
