package pg

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestChoose(t *testing.T) {
	v := func(e, n uint64) ObjState { return ObjState{Ver: EVersion{e, n}, Size: 10, Meta: 1} }
	bad := ObjState{Ver: EVersion{9, 9}, Deep: true, Corrupt: true}
	for _, c := range []struct {
		name       string
		copies     []Copy
		good       []int
		consistent bool
		ok         bool
	}{
		{"all agree", []Copy{{true, v(1, 2)}, {true, v(1, 2)}, {true, v(1, 2)}}, []int{0, 1, 2}, true, true},
		{"majority wins over newer", []Copy{{true, v(1, 3)}, {true, v(1, 2)}, {true, v(1, 2)}}, []int{1, 2}, false, true},
		{"tie goes to newer", []Copy{{true, v(1, 2)}, {true, v(1, 3)}}, []int{1}, false, true},
		{"tie of equals goes to the primary", []Copy{{true, ObjState{Ver: EVersion{1, 2}, Meta: 7}}, {true, v(1, 2)}}, []int{0}, false, true},
		{"a corrupt copy never counts", []Copy{{true, bad}, {true, bad}, {true, v(1, 1)}}, []int{2}, false, true},
		{"absent is a copy too (a delete)", []Copy{{false, ObjState{}}, {false, ObjState{}}, {true, v(1, 5)}}, []int{0, 1}, false, true},
		{"no good copy", []Copy{{true, bad}, {true, bad}}, nil, false, false},
	} {
		good, consistent, ok := Choose(c.copies)
		if !slices.Equal(good, c.good) || consistent != c.consistent || ok != c.ok {
			t.Errorf("%s: Choose = %v, %v, %v; want %v, %v, %v", c.name, good, consistent, ok, c.good, c.consistent, c.ok)
		}
	}
}

// Over random copies: the chosen group is never corrupt, all its members
// are equal, and no other group has more members.
func TestChooseProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 50000; i++ {
		copies := make([]Copy, 1+r.IntN(5))
		for j := range copies {
			copies[j] = Copy{Present: r.IntN(4) > 0, State: ObjState{Ver: EVersion{1, uint64(r.IntN(3))}, Size: 1, Corrupt: r.IntN(5) == 0}}
			if !copies[j].Present {
				copies[j].State = ObjState{}
			}
		}
		good, _, ok := Choose(copies)
		if !ok {
			for _, c := range copies {
				if !c.Present || !c.State.Corrupt {
					t.Fatalf("%+v: a good copy exists, Choose found none", copies)
				}
			}
			continue
		}
		first := copies[good[0]]
		for _, g := range good {
			c := copies[g]
			if c.Present && c.State.Corrupt || c.Present != first.Present || c.Present && !SameCopy(c.State, first.State) {
				t.Fatalf("%+v: chose %v, which are not all good and equal", copies, good)
			}
		}
		for j, c := range copies {
			if c.Present && c.State.Corrupt {
				continue
			}
			n := 0
			for _, d := range copies {
				if d.Present == c.Present && (!c.Present || SameCopy(c.State, d.State)) {
					n++
				}
			}
			if n > len(good) {
				t.Fatalf("%+v: chose %v, but copy %d has %d equals", copies, good, j, n)
			}
		}
	}
}
