package pg

// A read's fast path. A read of an erasure-coded object needs the version
// that stands and K shards of it; in the common case every position holds
// the same version, and asking all of them for their meta before reading
// the data costs a round trip. So the primary asks only some positions,
// each for its meta and its part of the range at once, and serves what
// they sent if those answers alone settle the decision: DecideShardsPart.
//
// Why asking fewer positions than there are is safe. Say q positions are
// asked and u = K+M-q are not, every asked position answers, none is
// stale, and all hold one version v (a tombstone at v, or no shard when v
// is a delete or "absent", counts as holding it: DecideShards keeps them;
// a position v skipped holds what v names for it: shardheld.go).
// Then:
//
//   - v stands on the asked positions alone: it has q ≥ K votes, and if
//     it is a partial write, every data position is asked and holds it;
//   - no newer write of every position can stand whatever the others
//     hold: an asked position votes for it only if it holds that write
//     or rolls back from a newer one, and it holds v, so a newer write's
//     votes come from the u others, and u < K;
//   - no newer partial write can stand either: the positions it skipped
//     vote for it without a trace of it, but it stands only if every
//     voting data position it wrote holds it or rolls back to it
//     (partialStands), and those are asked and hold v;
//   - an older version never beats v, which has K votes.
//
// So DecideShards over every position would decide v too (or, when v is
// "absent" and some position kept a delete's tombstone, that tombstone:
// either way the object is not served). q ≥ K and u < K is q ≥ max(K, M+1):
// with K > M (2+1, 4+2, 8+3) the K data positions, which a read needs
// anyway, are enough; with K ≤ M (2+2) a write that reached only parity
// positions could stand with every data position agreeing on the version
// before it, so M+1-K parity positions are asked for their meta too, in
// the same parallel round (FastReadPositions).
//
// The positions peering found lacking the object (stale) have no vote, so
// an asked one that is stale sends the read to the full lookup, as does any
// disagreement, a position down or failing, or a version that must roll
// back: the fast path only ever serves what the full decision would.

// FastReadPositions is how many positions, the first ones, a read's fast
// path asks (DecideShardsPart): the K data positions, and with K ≤ M
// enough parity positions that those not asked are fewer than K.
func FastReadPositions(k, m int) int { return max(k, m+1) }

// DecideShardsPart decides an object from the shards of the positions a
// read asked (the others are not Listed), as DecideShards does, and says
// whether that decision is final: the one DecideShards would make with
// every position's answer, whatever the others hold. It is final only when
// every asked position answered, none is stale, all hold the version that
// stands, they are at least k and those not asked fewer than k. Otherwise
// the caller asks every position.
func DecideShardsPart(k int, shards []ShardCopy) (ShardPlan, bool) {
	asked := 0
	for _, s := range shards {
		if s.Listed {
			if s.Stale {
				return ShardPlan{}, false
			}
			asked++
		}
	}
	if asked < k || len(shards)-asked >= k {
		return ShardPlan{}, false
	}
	p := DecideShards(k, shards)
	if p.Unfound || len(p.Keep) != asked {
		return ShardPlan{}, false
	}
	return p, true
}

// A client's read from the positions, without the primary
// (client.Pool.ReadSettledPieces): the client knows nothing of peering, so
// it asks every position, and the PG's primary answers only while the PG
// is active and clean, which is what makes no position stale. DecideSettled
// then serves a version only when every position holds it (the newest
// version any of them has; the positions a partial write skipped hold
// what it names for them) with nothing to roll back, and it is not a
// delete: DecideShards over the same answers keeps all of them at that
// version (it has K+M votes, every data position it wrote holds it, and no
// position votes for a newer one), and the version was complete
// everywhere, so no rollback ever undoes it. It is stricter than
// DecideShardsPart, whose primary holds the object's lock and peering's
// view.

// DecideSettled returns the version a client may serve from the answers of
// all k+m positions (every one Listed), if it may serve one.
func DecideSettled(shards []ShardCopy) (EVersion, bool) {
	var v EVersion
	for _, s := range shards {
		if v.Less(s.Ver) {
			v = s.Ver
		}
	}
	o := versionOf(shards, v)
	for i, s := range shards {
		if !s.Listed || s.Stale || s.CanRollBack || s.Tombstone || !o.heldBy(s, i) {
			return EVersion{}, false
		}
	}
	return v, v != EVersion{}
}
