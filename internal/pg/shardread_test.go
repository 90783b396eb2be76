package pg

import (
	"math/rand/v2"
	"testing"
)

// randomShard draws one position's shard among a few versions, with and
// without rollback state, and absence; version 1'2 is a delete (one
// version is one write, a put or a delete, on every shard).
func randomShard(r *rand.Rand) ShardCopy {
	vers := []EVersion{{}, {1, 1}, {1, 2}, {2, 3}}
	s := ShardCopy{Listed: r.IntN(8) != 0, Stale: r.IntN(10) == 0}
	i := r.IntN(len(vers))
	s.Ver = vers[i]
	if i > 0 && r.IntN(2) == 0 {
		s.CanRollBack, s.Prev = true, vers[r.IntN(i)]
	}
	s.Tombstone = s.Ver == EVersion{1, 2}
	if !s.Listed {
		s = ShardCopy{}
	}
	return s
}

// served is what a read serves under a plan: nothing for an unfound
// object, else the version if it is data (absent and tombstones alike).
func served(shards []ShardCopy, p ShardPlan) (EVersion, bool) {
	if p.Unfound {
		return EVersion{}, false
	}
	if isTombstone(shards, p.Ver) {
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
		all := randomAnswers(r, k+m, 0)
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
			if all[i].Ver != p.Ver && !(isTombstone(all, full.Ver) && all[i].Ver == (EVersion{})) && p.Ver != (EVersion{}) {
				t.Fatalf("%d+%d: the fast path reads position %d at %v, the full decision %v", k, m, i, all[i].Ver, full.Ver)
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
		all := randomAnswers(r, k+m, 20)
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
func randomAnswers(r *rand.Rand, n, oneIn int) []ShardCopy {
	all := make([]ShardCopy, n)
	for i := range all {
		all[i] = randomShard(r)
		all[i].Listed = oneIn == 0 || r.IntN(oneIn) != 0
	}
	return all
}
