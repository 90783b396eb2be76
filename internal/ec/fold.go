package ec

import (
	"errors"
	"slices"
)

// Folds check that a stripe set codes without moving the data: each
// position XORs the chunks of its shard into one chunk (FoldInto), and the
// folds of the data positions encode to the folds of the parity positions,
// since Reed-Solomon is linear over XOR and a short shard reads as zeros.
// If every stripe codes, the folds do; a stripe that does not code makes
// them fail unless another stripe's error cancels it exactly.

// FoldInto XORs part, the bytes of a shard at offset at, into fold, a
// chunk of the layout's unit.
func (l Layout) FoldInto(fold, part []byte, at int64) {
	for len(part) > 0 {
		in := int(at % int64(l.Unit))
		n := min(len(part), l.Unit-in)
		xorInto(fold[in:in+n], part[:n])
		part, at = part[n:], at+int64(n)
	}
}

// CheckFolds reports whether the folds of every position (K+M of them, a
// unit each) code together and, if not, the one position whose fold,
// rebuilt from the others, makes them code (bad -1 when none or several
// could: with M = 1 a mismatch is found but not placed).
func (c *Codec) CheckFolds(folds [][]byte) (ok bool, bad int, err error) {
	if len(folds) != c.l.K+c.l.M || slices.ContainsFunc(folds, func(f []byte) bool { return len(f) != c.l.Unit }) {
		return false, -1, errors.New("check folds: want one fold of a unit per position")
	}
	if ok, err := c.Verify(folds); ok || err != nil {
		return ok, -1, err
	}
	bad = -1
	for i := range folds {
		rebuilt := slices.Clone(folds)
		rebuilt[i] = nil
		if c.Reconstruct(rebuilt) != nil {
			continue
		}
		if ok, _ := c.Verify(rebuilt); !ok {
			continue
		}
		if bad >= 0 {
			return false, -1, nil // two positions could be the bad one
		}
		bad = i
	}
	return false, bad, nil
}
