package client

import (
	"errors"
	"testing"

	"github.com/cairn-storage/cairn/internal/pg"
)

// A client serves a read from the positions only when every one answered
// with the same version, none able to roll it back, none a tombstone.
func TestAgreed(t *testing.T) {
	v := pg.EVersion{Epoch: 3, Version: 9}
	good := func() []positionReply {
		return []positionReply{{meta: pg.ShardMeta{Ver: v, Size: 100}}, {meta: pg.ShardMeta{Ver: v, Size: 100, Position: 1}},
			{meta: pg.ShardMeta{Ver: v, Size: 100, Position: 2}}}
	}
	if size, ok := agreed(good()); !ok || size != 100 {
		t.Fatalf("three positions at one version: %d %v", size, ok)
	}
	for name, spoil := range map[string]func(r []positionReply){
		"a position failed":          func(r []positionReply) { r[2].err = errors.New("down") },
		"another version":            func(r []positionReply) { r[1].meta.Ver.Version = 8 },
		"a write that may roll back": func(r []positionReply) { r[0].meta.CanRollBack = true },
		"a tombstone":                func(r []positionReply) { r[2].meta.Tombstone = true },
		"another size":               func(r []positionReply) { r[1].meta.Size = 99 },
	} {
		r := good()
		spoil(r)
		if _, ok := agreed(r); ok {
			t.Errorf("%s: the read would be served from the positions", name)
		}
	}
	if _, ok := agreed(nil); ok {
		t.Error("no positions: the read would be served")
	}
}
