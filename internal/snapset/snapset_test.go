package snapset

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestModel runs random histories of snapshots, writes, whiteouts and
// trims against one object and checks that every live snapshot resolves to
// exactly the content the object had when the snapshot was taken.
func TestModel(t *testing.T) {
	for seed := uint64(0); seed < 500; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		var (
			set      Set
			head     = -1 // content id; -1: absent
			clones   = map[uint64]int{}
			seq      uint64
			snaps    = map[uint64]int{} // live snapshot → content then
			nextData = 0
		)
		for step := 0; step < 200; step++ {
			switch r := rng.IntN(10); {
			case r < 2: // snapshot
				seq++
				snaps[seq] = head
			case r < 7: // write under the newest sequence
				nextData++
				clone, after := set.Cow(seq, head >= 0, 0)
				if clone {
					clones[seq] = head
				}
				set, head = after, nextData
			case r < 8 && len(snaps) > 0: // remove a snapshot, trim
				live := keys(snaps)
				delete(snaps, live[rng.IntN(len(live))])
				drop, after := set.Trim(keys(snaps))
				for _, id := range drop {
					delete(clones, id)
				}
				set = after
			case r < 9 && head >= 0: // delete the head, as the OSD does
				clone, after := set.Cow(seq, true, 0)
				if clone {
					clones[seq] = head
				}
				if len(after.Clones) > 0 {
					set, head = after, 0 // whiteout: kept, empty, so the clones stay found
				} else {
					set, head = Set{}, -1
				}
			}
			if err := set.Check(); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			back, err := Decode(set.Encode())
			if err != nil || !equalSets(back, set) {
				t.Fatalf("seed %d step %d: round trip %+v → %+v, %v", seed, step, set, back, err)
			}
			for s, want := range snaps {
				v := set.Resolve(s, head >= 0)
				got := -1
				switch {
				case v.Exists && v.Head:
					got = head
				case v.Exists:
					c, ok := clones[v.Clone]
					if !ok {
						t.Fatalf("seed %d step %d: snap %d resolves to trimmed clone %d", seed, step, s, v.Clone)
					}
					got = c
				}
				if got != want {
					t.Fatalf("seed %d step %d: snap %d reads content %d, want %d (set %+v)", seed, step, s, got, want, set)
				}
			}
			if len(clones) != len(set.Clones) {
				t.Fatalf("seed %d step %d: %d clone objects, set records %d", seed, step, len(clones), len(set.Clones))
			}
		}
	}
}

func keys(m map[uint64]int) []uint64 {
	var out []uint64
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func equalSets(a, b Set) bool {
	return a.Seq == b.Seq && slices.Equal(a.Clones, b.Clones)
}

func TestDecodeRejects(t *testing.T) {
	good := Set{Seq: 9, Clones: []Clone{{ID: 3, From: 1, Size: 10}, {ID: 7, From: 3}}}.Encode()
	if _, err := Decode(good); err != nil {
		t.Fatal(err)
	}
	bad := map[string][]byte{
		"format":      append([]byte{2}, good[1:]...),
		"truncated":   good[:len(good)-1],
		"trailing":    append(slices.Clone(good), 0),
		"order":       Set{Seq: 9, Clones: []Clone{{ID: 7, From: 3}, {ID: 3, From: 1}}}.Encode(),
		"empty range": Set{Seq: 9, Clones: []Clone{{ID: 3, From: 3}}}.Encode(),
		"old head":    Set{Seq: 2, Clones: []Clone{{ID: 3, From: 1}}}.Encode(),
	}
	for name, b := range bad {
		if _, err := Decode(b); err == nil {
			t.Errorf("%s: %x decoded", name, b)
		}
	}
}

func TestCloneName(t *testing.T) {
	n := CloneName("vol.1.0000000000000002", 5)
	if !IsClone(n) || IsClone("vol.1.0000000000000002") || IsClone("\x00pgmeta") {
		t.Fatalf("IsClone wrong for %q", n)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Set{Seq: 9, Clones: []Clone{{ID: 3, From: 1, Size: 10}}}.Encode())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Decode(b)
		if err != nil || len(b) == 0 {
			return
		}
		if enc := s.Encode(); !bytes.Equal(enc, b) {
			t.Fatalf("re-encoding differs: %x → %x", b, enc)
		}
	})
}

func FuzzDecodeSnaps(f *testing.F) {
	f.Add(EncodeSnaps([]uint64{1, 5, 300}))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSnaps(b)
		if err != nil {
			return
		}
		if _, err := DecodeSnaps(EncodeSnaps(s)); err != nil {
			t.Fatal(err)
		}
	})
}
