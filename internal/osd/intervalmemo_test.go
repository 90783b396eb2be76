package osd

import (
	"fmt"
	"testing"
)

// An interval memo answers only in the interval it was filled in, forgets
// on request, and starts over when full instead of growing.
func TestIntervalMemo(t *testing.T) {
	var m intervalMemo[int]
	if _, ok := m.get(1, "a"); ok {
		t.Fatal("an empty memo knows a")
	}
	m.set(1, "a", 7)
	if v, ok := m.get(1, "a"); !ok || v != 7 {
		t.Fatalf("get a: %d %v", v, ok)
	}
	if _, ok := m.get(2, "a"); ok {
		t.Fatal("a set in interval 1 is known in interval 2")
	}
	m.set(2, "b", 1)
	if _, ok := m.get(2, "a"); ok {
		t.Fatal("a new interval kept an old entry")
	}
	m.forget("b")
	if _, ok := m.get(2, "b"); ok {
		t.Fatal("b known after forget")
	}
	for i := range maxMemo + 1 {
		m.set(2, fmt.Sprint(i), i)
	}
	if len(m.m) > maxMemo {
		t.Fatalf("the memo holds %d objects, past its bound %d", len(m.m), maxMemo)
	}
	if v, ok := m.get(2, fmt.Sprint(maxMemo)); !ok || v != maxMemo {
		t.Fatal("the entry that made the memo start over is not in it")
	}
}
