package pg

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// A seeded simulation of one erasure-coded PG (K+M positions, K from 2 to
// 4, M 1 or 2, min_size K or K+1) through puts, partial writes and
// deletes that reach only some shards, positions going down and coming
// back, completions that trim the rollback state, and peering by
// ShardsPeerable and DecideShards. A partial write changes one data chunk
// and the parity, and skips the other data positions (shardheld.go).
// Every shard holds its position's bytes, so the checks compare bytes, not
// only versions: after every peering, no acknowledged write is lost (what
// stands is the acknowledged version or a later write that failed), what
// stands can be rebuilt (K shards hold it or roll back to it), and every
// position up holds that version's bytes for its position; at the end,
// with every position back, the acknowledged bytes. Clients read from
// the positions too (settledsim_test.go).

type ecShard struct {
	ver, prev      EVersion
	canRollBack    bool
	val            uint64 // the bytes of its position (0: a delete's tombstone)
	prevVal        uint64
	held, prevHeld []PosVer
}

type ecWrite struct {
	ver  EVersion
	data []uint64 // the K data chunks; nil: a delete
	held []PosVer // the positions a partial write skipped
}

type ecSim struct {
	r       *rand.Rand
	k, n    int
	minSize int
	up      []bool
	shards  []map[string]ecShard
	writes  map[EVersion]ecWrite // every write made, by version
	cur     map[string]EVersion  // what stands, as the primary knows it
	acked   map[string]ecWrite
	later   map[string][]ecWrite // writes after the acknowledged one that failed
	unfound map[string]bool      // peering found no version to stand: writes wait
	last    []int                // the positions the record names complete (they vote)
	down    bool                 // the PG cannot peer: it serves nothing
	epoch   uint64
	version uint64
	read    *ecRead // a client's read from the positions, half done
	reads   int     // reads served from the positions
	trace   strings.Builder
}

func newECSim(seed uint64) *ecSim {
	r := rand.New(rand.NewPCG(seed, 0xec))
	k, m := 2+r.IntN(3), 1+r.IntN(2)
	s := &ecSim{r: r, k: k, n: k + m, minSize: k + r.IntN(2), writes: map[EVersion]ecWrite{}, cur: map[string]EVersion{}, acked: map[string]ecWrite{}, later: map[string][]ecWrite{}, unfound: map[string]bool{}, epoch: 1}
	for i := 0; i < s.n; i++ {
		s.up = append(s.up, true)
		s.shards = append(s.shards, map[string]ecShard{})
		s.last = append(s.last, i)
	}
	fmt.Fprintf(&s.trace, "%d+%d, min_size %d\n", k, m, s.minSize)
	return s
}

var ecNames = []string{"a", "b", "c", "d"}

// bytesAt is what position pos holds of version v: its data chunk, a
// parity derived from every chunk, or nothing (absent, a delete).
func (s *ecSim) bytesAt(v EVersion, pos int) uint64 {
	w := s.writes[v]
	if w.data == nil {
		return 0
	}
	if pos < s.k {
		return w.data[pos]
	}
	h := uint64(pos+1) * 0x9e3779b97f4a7c15
	for _, x := range w.data {
		h = (h ^ x) * 0x100000001b3
	}
	return h | 1
}

// nextWrite makes the write of val to name (0: a delete): a partial
// write of one data chunk, half the time that the object is there, else a
// put of every chunk.
func (s *ecSim) nextWrite(name string, val uint64) ecWrite {
	s.version++
	w := ecWrite{ver: EVersion{s.epoch, s.version}}
	if val == 0 {
		return w
	}
	base := s.writes[s.cur[name]]
	if base.data == nil || s.r.IntN(2) == 0 {
		for j := 0; j < s.k; j++ {
			w.data = append(w.data, val<<4|uint64(j+1))
		}
		return w
	}
	d := s.r.IntN(s.k)
	w.data = slices.Clone(base.data)
	w.data[d] = val<<4 | uint64(d+1)
	held := make([]EVersion, s.k)
	for j := range held {
		held[j] = heldAt(base.held, base.ver, j)
	}
	w.held = PartialHeld(held, []int{d})
	return w
}

// write sends a write (val 0: a delete) to every position up that it
// changes; some apply it before the primary fails. Acknowledged when every
// one of them applied it and the positions up are at least min_size.
func (s *ecSim) write(name string, val uint64) {
	upN := 0
	for _, u := range s.up {
		if u {
			upN++
		}
	}
	if upN < s.minSize || s.unfound[name] || s.down {
		return
	}
	w := s.nextWrite(name, val)
	s.writes[w.ver] = w
	fails := s.r.IntN(4) == 0
	sent, applied := 0, 0
	for i, u := range s.up {
		if !u || heldAt(w.held, w.ver, i) != w.ver {
			continue
		}
		sent++
		if fails && s.r.IntN(2) == 0 {
			continue
		}
		old, had := s.shards[i][name]
		sh := ecShard{ver: w.ver, val: s.bytesAt(w.ver, i), held: w.held, canRollBack: true}
		if had && old.val != 0 { // over a tombstone: rolls back to absent, the same
			sh.prev, sh.prevVal, sh.prevHeld = old.ver, old.val, old.held
		}
		s.shards[i][name] = sh
		applied++
	}
	if !fails && applied == sent {
		s.acked[name], s.later[name], s.cur[name] = w, nil, w.ver
		fmt.Fprintf(&s.trace, "ack %s %s data=%v held=%v on %d\n", name, w.ver, w.data, w.held, applied)
		if s.r.IntN(2) == 0 {
			// Acknowledged: the positions that hold it may drop what
			// they kept to roll it back (a delete, every trace), as
			// today's OSDs do; a position down then holds an older shard.
			s.complete(name, w.ver)
		}
		return
	}
	s.later[name] = append(s.later[name], w)
	fmt.Fprintf(&s.trace, "fail %s %s data=%v held=%v on %d of %d\n", name, w.ver, w.data, w.held, applied, sent)
	s.epoch++ // the primary failed: a new interval peers
	s.peer()
}

// complete trims, on the positions up, the rollback state of an
// acknowledged write and of any older one a position it skipped still
// keeps (as the OSD's trim does); a completed delete leaves no trace. Some
// trims are lost (a position's message dropped, its OSD cut before it
// applied one): what they leave behind must be harmless.
func (s *ecSim) complete(name string, v EVersion) {
	for i := range s.shards {
		if !s.up[i] || s.r.IntN(4) == 0 {
			continue
		}
		if sh, ok := s.shards[i][name]; ok && !v.Less(sh.ver) {
			if sh.val == 0 {
				if sh.ver == v {
					delete(s.shards[i], name)
				}
				continue
			}
			sh.canRollBack, sh.prev, sh.prevVal, sh.prevHeld = false, EVersion{}, 0, nil
			s.shards[i][name] = sh
		}
	}
	fmt.Fprintf(&s.trace, "complete %s %s\n", name, v)
}

// copyOf is position i's shard of name as it lists it.
func (s *ecSim) copyOf(i int, name string) ShardCopy {
	sh := s.shards[i][name]
	return ShardCopy{Listed: true, Ver: sh.ver, Prev: sh.prev, CanRollBack: sh.canRollBack, Tombstone: sh.val == 0 && sh.ver != (EVersion{}), Held: sh.held, PrevHeld: sh.prevHeld}
}

// peer decides every object from the positions up and applies the plan,
// once K positions the record names complete answer; only those vote
// (the others are Stale). The positions up are then complete, or, with an
// object unfound, only those that voted (DecideShardsPG's rule).
func (s *ecSim) peer() error {
	if err := ShardsPeerable(s.k, s.last, func(p int) bool { return s.up[p] }); err != nil {
		s.down = true
		fmt.Fprintf(&s.trace, "pg down: %v\n", err)
		return nil
	}
	s.down = false
	voter := make([]bool, s.n)
	for _, i := range s.last {
		voter[i] = s.up[i]
	}
	anyUnfound := false
	defer func() {
		s.last = s.last[:0]
		for i, u := range s.up {
			if u && (voter[i] || !anyUnfound) {
				s.last = append(s.last, i)
			}
		}
	}()
	for _, name := range ecNames {
		copies := make([]ShardCopy, s.n)
		for i := range copies {
			if s.up[i] {
				copies[i] = s.copyOf(i, name)
				copies[i].Stale = !voter[i]
			}
		}
		p := DecideShards(s.k, copies)
		s.unfound[name] = p.Unfound
		if p.Unfound {
			anyUnfound = true
			fmt.Fprintf(&s.trace, "peer %s: unfound\n", name)
			continue
		}
		if err := s.checkStands(name, p.Ver); err != nil {
			return err
		}
		if src := len(p.Keep) + len(p.RollBack); p.Ver != (EVersion{}) && src < s.k {
			return fmt.Errorf("%s: %s stands on %d shards: a %d+%d object cannot be rebuilt from fewer than %d", name, p.Ver, src, s.k, s.n-s.k, s.k)
		}
		if err := s.apply(name, p); err != nil {
			return err
		}
		s.cur[name] = p.Ver
		fmt.Fprintf(&s.trace, "peer %s: %s stands (keep %v, roll back %v, rebuild %v)\n", name, p.Ver, p.Keep, p.RollBack, p.Rebuild)
		if err := s.agree(name, p.Ver); err != nil {
			return err
		}
	}
	return nil
}

// apply carries out a plan as the OSDs would: a shard rolls back to what
// it kept, a rebuilt one gets its position's bytes of the standing
// version, decoded from K shards that hold it (checked here: those K
// must hold its bytes); the shards that keep it keep their rollback state
// until the PG is clean (every position holds the object), when it is
// trimmed.
func (s *ecSim) apply(name string, p ShardPlan) error {
	for _, i := range p.RollBack {
		sh := s.shards[i][name]
		if s.shards[i][name] = (ecShard{ver: sh.prev, val: sh.prevVal, held: sh.prevHeld}); sh.prev == (EVersion{}) {
			delete(s.shards[i], name)
		}
	}
	for _, i := range append(p.Keep, p.RollBack...) {
		if got, want := s.shards[i][name].val, s.bytesAt(p.Ver, i); got != want {
			return fmt.Errorf("%s: position %d is to hold %s, but holds %d where %s has %d", name, i, p.Ver, got, p.Ver, want)
		}
	}
	defer func() {
		if !slices.Contains(s.up, false) && p.Ver != (EVersion{}) {
			s.complete(name, p.Ver)
		}
	}()
	for _, i := range append(append(p.Keep, p.RollBack...), p.Rebuild...) {
		if p.Ver == (EVersion{}) {
			delete(s.shards[i], name)
		} else if slices.Contains(p.Rebuild, i) {
			s.shards[i][name] = ecShard{ver: p.Ver, val: s.bytesAt(p.Ver, i), held: s.writes[p.Ver].held}
		}
	}
	return nil
}

// agree: after peering every position up holds its bytes of version v.
func (s *ecSim) agree(name string, v EVersion) error {
	for i, u := range s.up {
		if got, want := s.shards[i][name].val, s.bytesAt(v, i); u && got != want {
			return fmt.Errorf("%s: after peering position %d holds %d, where %s has %d", name, i, got, v, want)
		}
	}
	return nil
}

// checkStands: what stands is the acknowledged write or a later one that
// failed (a delete's tombstone stands as "absent" too).
func (s *ecSim) checkStands(name string, v EVersion) error {
	a, acked := s.acked[name]
	ok := func(w ecWrite) bool { return w.ver == v || w.data == nil && v == (EVersion{}) }
	if !acked && v == (EVersion{}) {
		return nil
	}
	if acked && ok(a) {
		return nil
	}
	for _, w := range s.later[name] {
		if ok(w) {
			return nil
		}
	}
	return fmt.Errorf("%s: %s stands, but the acknowledged write is %+v (later failed writes %v)", name, v, a, s.later[name])
}

func (s *ecSim) run(steps int) error {
	var val uint64
	for step := 0; step < steps; step++ {
		switch k := s.r.IntN(12); {
		case k >= 10:
			if err := s.readStep(); err != nil {
				return err
			}
		case k < 6:
			val++
			v := val
			if s.r.IntN(6) == 0 {
				v = 0
			}
			s.write(ecNames[s.r.IntN(len(ecNames))], v)
		case k < 8:
			i := s.r.IntN(s.n)
			s.up[i] = !s.up[i]
			fmt.Fprintf(&s.trace, "position %d up=%v\n", i, s.up[i])
			s.epoch++
			if err := s.peer(); err != nil {
				return err
			}
		default:
			s.epoch++
			if err := s.peer(); err != nil {
				return err
			}
		}
	}
	for i := range s.up {
		s.up[i] = true
	}
	s.epoch++
	if err := s.peer(); err != nil {
		return err
	}
	for _, name := range ecNames {
		if err := s.agree(name, s.cur[name]); err != nil {
			return fmt.Errorf("with every position back: %w", err)
		}
		if a, ok := s.acked[name]; ok && len(s.later[name]) == 0 {
			for i := 0; i < s.n; i++ {
				if got, want := s.shards[i][name].val, s.bytesAt(a.ver, i); got != want {
					return fmt.Errorf("%s: position %d holds %d, the acknowledged write %s has %d", name, i, got, a.ver, want)
				}
			}
		}
	}
	return nil
}

func TestShardSimulation(t *testing.T) {
	seeds := 3000
	if testing.Short() {
		seeds = 300
	}
	first := uint64(1)
	if *simSeed != 0 {
		first, seeds = *simSeed, 1
	}
	for seed := first; seed < first+uint64(seeds); seed++ {
		s := newECSim(seed)
		err := s.run(300)
		if *simSeed != 0 {
			t.Logf("seed %d history:\n%s", seed, s.trace.String())
		}
		if err != nil {
			t.Fatalf("seed %d: %v\nhistory:\n%s\nreplay: go test ./internal/pg -run TestShardSimulation -seed %d -v", seed, err, s.trace.String(), seed)
		}
	}
}

func TestDecideShards(t *testing.T) {
	v := func(n uint64) EVersion { return EVersion{1, n} }
	skip4 := []PosVer{{1, v(3)}}
	cases := []struct {
		what   string
		k      int
		shards []ShardCopy
		want   ShardPlan
	}{
		{"all agree", 2, []ShardCopy{{Listed: true, Ver: v(3)}, {Listed: true, Ver: v(3)}, {Listed: true, Ver: v(3)}},
			ShardPlan{Ver: v(3), Keep: []int{0, 1, 2}}},
		{"a write on one shard rolls back", 2, []ShardCopy{{Listed: true, Ver: v(4), Prev: v(3), CanRollBack: true}, {Listed: true, Ver: v(3)}, {Listed: true, Ver: v(3)}},
			ShardPlan{Ver: v(3), Keep: []int{1, 2}, RollBack: []int{0}}},
		{"a write on K shards stands, the stale one is rebuilt", 2, []ShardCopy{{Listed: true, Ver: v(4), Prev: v(3), CanRollBack: true}, {Listed: true, Ver: v(4), Prev: v(3), CanRollBack: true}, {Listed: true, Ver: v(3)}},
			ShardPlan{Ver: v(4), Keep: []int{0, 1}, Rebuild: []int{2}}},
		{"a create on fewer than K shards is undone", 3, []ShardCopy{{Listed: true, Ver: v(5), CanRollBack: true}, {Listed: true}, {Listed: true}, {Listed: true}},
			ShardPlan{Ver: EVersion{}, Keep: []int{1, 2, 3}, RollBack: []int{0}}},
		{"a delete on K shards stands: the old data goes", 2, []ShardCopy{{Listed: true}, {Listed: true}, {Listed: true, Ver: v(2)}},
			ShardPlan{Ver: EVersion{}, Keep: []int{0, 1}, Rebuild: []int{2}}},
		{"fewer than K shards of anything: unfound", 3, []ShardCopy{{Listed: true, Ver: v(4)}, {Listed: true, Ver: v(3)}, {}, {}},
			ShardPlan{Unfound: true}},
		{"a shard that cannot roll back far enough is rebuilt", 2, []ShardCopy{{Listed: true, Ver: v(4), Prev: v(3), CanRollBack: true}, {Listed: true, Ver: v(2)}, {Listed: true, Ver: v(2)}},
			ShardPlan{Ver: v(2), Keep: []int{1, 2}, Rebuild: []int{0}}},
		{"a stale position's lack of an object is no vote: the one shard left is unfound, not deleted", 2, []ShardCopy{{Listed: true, Ver: v(5)}, {}, {Listed: true, Stale: true}, {Listed: true, Stale: true}},
			ShardPlan{Unfound: true}},
		{"a shard left on a stale position that missed the delete is deleted", 2, []ShardCopy{{Listed: true}, {Listed: true}, {Listed: true, Ver: v(1), Stale: true}},
			ShardPlan{Ver: EVersion{}, Keep: []int{0, 1}, Rebuild: []int{2}}},
		{"a stale position holding the version that stands keeps it; an old one is rebuilt", 2, []ShardCopy{{Listed: true, Ver: v(4)}, {Listed: true, Ver: v(4), Stale: true}, {Listed: true, Ver: v(4)}, {Listed: true, Ver: v(2), Stale: true}},
			ShardPlan{Ver: v(4), Keep: []int{0, 1, 2}, Rebuild: []int{3}}},
		{"down positions are missing", 2, []ShardCopy{{Listed: true, Ver: v(3)}, {}, {Listed: true, Ver: v(3)}},
			ShardPlan{Ver: v(3), Keep: []int{0, 2}, Missing: []int{1}}},
		// Partial writes on 2+1 (shardheld.go): 4 wrote position 0 and
		// the parity, and skipped position 1, which holds 3.
		{"a partial write stands with the data position it skipped", 2, []ShardCopy{{Listed: true, Ver: v(4), Prev: v(3), CanRollBack: true, Held: skip4}, {Listed: true, Ver: v(3)}, {Listed: true, Ver: v(3)}},
			ShardPlan{Ver: v(4), Keep: []int{0, 1}, Rebuild: []int{2}, Held: skip4}},
		{"a partial write on the parity alone does not stand: the data position it wrote holds the version before", 2, []ShardCopy{{Listed: true, Ver: v(3)}, {Listed: true, Ver: v(3)}, {Listed: true, Ver: v(4), Prev: v(3), CanRollBack: true, Held: skip4}},
			ShardPlan{Ver: v(3), Keep: []int{0, 1}, RollBack: []int{2}}},
		{"a partial write stands while the data position it wrote is down", 2, []ShardCopy{{}, {Listed: true, Ver: v(3)}, {Listed: true, Ver: v(4), Held: skip4}},
			ShardPlan{Ver: v(4), Keep: []int{1, 2}, Missing: []int{0}, Held: skip4}},
		{"a rebuilt shard holds what its version names for its position", 2, []ShardCopy{{Listed: true, Ver: v(4)}, {Listed: true, Ver: v(4), Held: skip4}, {Listed: true, Ver: v(4), Held: skip4}},
			ShardPlan{Ver: v(4), Keep: []int{0, 1, 2}, Held: skip4}},
		// 5 wrote position 1 and the parity over 4, and reached only the
		// parity: rolling back to 4 needs what 4 named for position 1.
		{"rolling back to a partial write: the version before names what the skipped position holds", 2, []ShardCopy{{}, {Listed: true, Ver: v(3)}, {Listed: true, Ver: v(5), Prev: v(4), CanRollBack: true, Held: []PosVer{{0, v(4)}}, PrevHeld: skip4}},
			ShardPlan{Ver: v(4), Keep: []int{1}, RollBack: []int{2}, Missing: []int{0}, Held: skip4}},
		{"a skipped position's own write rolls back to what the version standing names for it", 2, []ShardCopy{{}, {Listed: true, Ver: v(5), Prev: v(3), CanRollBack: true, Held: []PosVer{{0, v(4)}}}, {Listed: true, Ver: v(4), Held: skip4}},
			ShardPlan{Ver: v(4), Keep: []int{2}, RollBack: []int{1}, Missing: []int{0}, Held: skip4}},
	}
	for _, c := range cases {
		got := DecideShards(c.k, c.shards)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: got %+v, want %+v", c.what, got, c.want)
		}
	}
}

func TestShardMeta(t *testing.T) {
	m := ShardMeta{Ver: EVersion{7, 42}, Size: 5 << 20, Position: 2}
	partial := ShardMeta{Ver: EVersion{8, 2}, Size: 9, Position: 0, Prev: EVersion{8, 1}, CanRollBack: true, Held: []PosVer{{1, EVersion{7, 40}}, {3, EVersion{8, 1}}}, PrevHeld: []PosVer{{0, EVersion{7, 9}}}}
	rebuilt := ShardMeta{Ver: EVersion{8, 2}, Position: 1, Held: []PosVer{{1, EVersion{7, 40}}}}
	for _, m := range []ShardMeta{m, {Ver: EVersion{7, 43}, Position: 1, CanRollBack: true}, {Ver: EVersion{8, 1}, Position: 3, Prev: EVersion{7, 43}, CanRollBack: true, Tombstone: true}, partial, rebuilt} {
		got, err := DecodeShardMeta(m.Encode())
		if err != nil || !got.Equal(m) {
			t.Fatalf("round trip of %+v: %+v, %v", m, got, err)
		}
	}
	// Format 1, as shards written before rollback existed hold it.
	old := m.Encode()[:shardMetaLen1]
	old[0] = shardMetaFormat1
	if got, err := DecodeShardMeta(old); err != nil || !got.Equal(m) {
		t.Fatalf("format 1: %+v, %v", got, err)
	}
	noRollBack := m.Encode()
	noRollBack[31] = 1 // a previous version without the rollback flag
	badFlags := m.Encode()
	badFlags[27] = 4
	if got := rebuilt.Holding(); got != (EVersion{7, 40}) {
		t.Errorf("a shard rebuilt at a version that skipped its position holds %s, want 7'40", got)
	}
	p3 := partial.Encode()
	noneHeld := append(append(bytes.Clone(p3[:shardMetaLen]), 0), 0)
	withHeld := func(held ...PosVer) []byte { // m, at 8'2, skipping held
		b := ShardMeta{Ver: EVersion{8, 2}}.Encode()
		b[0] = shardMetaFormat3
		return appendHeld(appendHeld(b, held), nil)
	}
	if _, err := DecodeShardMeta(withHeld(PosVer{1, EVersion{7, 40}})); err != nil {
		t.Fatalf("withHeld: %v", err)
	}
	for _, bad := range [][]byte{nil, {1}, append([]byte{4}, m.Encode()[1:]...), append(m.Encode(), 0), append(old, 0), noRollBack, badFlags,
		p3[:len(p3)-1], append(bytes.Clone(p3), 0), noneHeld, append([]byte{3}, m.Encode()[1:]...),
		withHeld(PosVer{1, EVersion{8, 2}}), withHeld(PosVer{1, EVersion{}}), withHeld(PosVer{2, EVersion{7, 1}}, PosVer{1, EVersion{7, 1}}), withHeld(PosVer{1, EVersion{7, 1}}, PosVer{1, EVersion{7, 1}})} {
		if _, err := DecodeShardMeta(bad); !errors.Is(err, ErrBadShardMeta) {
			t.Errorf("DecodeShardMeta(%x): %v, want ErrBadShardMeta", bad, err)
		}
	}
}

func FuzzDecodeShardMeta(f *testing.F) {
	f.Add(ShardMeta{Ver: EVersion{3, 4}, Size: 5, Position: 1}.Encode())
	f.Add(ShardMeta{Ver: EVersion{3, 4}, Prev: EVersion{2, 9}, CanRollBack: true, Tombstone: true}.Encode())
	f.Add(append([]byte{shardMetaFormat1}, make([]byte, shardMetaLen1-1)...))
	f.Add([]byte{1, 2, 3})
	f.Add(ShardMeta{Ver: EVersion{8, 2}, Prev: EVersion{8, 1}, CanRollBack: true, Held: []PosVer{{1, EVersion{7, 40}}}, PrevHeld: []PosVer{{0, EVersion{7, 9}}}}.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeShardMeta(b)
		if err != nil {
			return
		}
		// Format 1 is read, never written: it comes back as format 2.
		if b[0] != shardMetaFormat1 && !bytes.Equal(m.Encode(), b) {
			t.Fatalf("decode/encode not stable: %x vs %x", m.Encode(), b)
		}
		if m2, err := DecodeShardMeta(m.Encode()); err != nil || !m2.Equal(m) {
			t.Fatalf("round trip of %+v: %+v, %v", m, m2, err)
		}
	})
}

// DecideShardsPG: which positions vote (those the record names complete,
// as the same OSD at the same position), what each position must have
// rebuilt, what is unfound, and which positions the new record names
// complete.
func TestDecideShardsPG(t *testing.T) {
	v := func(n uint64) EVersion { return EVersion{1, n} }
	list := func(objs map[string]uint64) *Listing {
		l := &Listing{Objs: map[string]ObjState{}}
		for n, ver := range objs {
			l.Objs[n] = ObjState{Ver: v(ver)}
		}
		return l
	}
	ids := func(o ...clustermap.OSDID) []clustermap.OSDID { return o }
	cases := []struct {
		what      string
		k         int
		positions []clustermap.OSDID
		rec       *Record
		lists     []*Listing
		err       string
		missing   string // fmt of Missing
		unfound   string
		complete  string
	}{
		{"never recorded: every position votes", 2, ids(1, 2, 3), nil,
			[]*Listing{list(map[string]uint64{"a": 3}), list(map[string]uint64{"a": 3}), list(nil)},
			"", "map[osd.3:map[a:{}]]", "map[]", "[osd.1 osd.2]"},
		{"back after missing a put and a delete: its old shard of the deleted object does not vote", 2, ids(1, 2, 3),
			&Record{Acting: ids(1, 2), Complete: ids(1, 2), Positions: ids(1, 2, -1)},
			[]*Listing{list(map[string]uint64{"new": 7}), list(map[string]uint64{"new": 7}), list(map[string]uint64{"deleted": 2})},
			"", "map[osd.3:map[deleted:{} new:{}]]", "map[]", "[osd.1 osd.2]"},
		{"fewer than K complete positions answer: down", 2, ids(1, -1, 3),
			&Record{Acting: ids(1, 2), Complete: ids(1, 2), Positions: ids(1, 2, -1)},
			[]*Listing{list(nil), nil, list(nil)},
			"waiting for positions [1]", "", "", ""},
		{"a new OSD at a position is stale: it lacks everything", 2, ids(1, 2, 4),
			&Record{Acting: ids(1, 2, 3), Complete: ids(1, 2, 3), Positions: ids(1, 2, 3)},
			[]*Listing{list(map[string]uint64{"a": 1}), list(map[string]uint64{"a": 1}), list(nil)},
			"", "map[osd.4:map[a:{}]]", "map[]", "[osd.1 osd.2]"},
		{"an OSD complete at another position does not vote at this one", 2, ids(1, 3, 2),
			&Record{Acting: ids(1, 2, 3), Complete: ids(1, 2, 3), Positions: ids(1, 2, 3)},
			[]*Listing{list(map[string]uint64{"a": 1}), list(map[string]uint64{"a": 1}), list(map[string]uint64{"a": 1})},
			"waiting for positions [1 2]", "", "", ""},
		{"unfound: only voters are complete, so the stale positions cannot vote it away later", 2, ids(1, 2, 3, 4),
			&Record{Acting: ids(1, 2), Complete: ids(1, 2), Positions: ids(1, 2, -1, -1)},
			[]*Listing{list(map[string]uint64{"w": 5, "a": 1}), list(map[string]uint64{"w": 4, "a": 1}), list(nil), list(nil)},
			"", "map[osd.3:map[a:{}] osd.4:map[a:{}]]", "map[w:{}]", "[osd.1 osd.2]"},
	}
	for _, c := range cases {
		res, err := DecideShardsPG(1, 9, c.k, c.positions, c.rec, c.lists)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: err %v, want %q", c.what, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.what, err)
			continue
		}
		if got := fmt.Sprint(res.Missing); got != c.missing {
			t.Errorf("%s: missing %s, want %s", c.what, got, c.missing)
		}
		if got := fmt.Sprint(res.Unfound); got != c.unfound {
			t.Errorf("%s: unfound %s, want %s", c.what, got, c.unfound)
		}
		if got := fmt.Sprint(res.Complete); got != c.complete {
			t.Errorf("%s: complete %s, want %s", c.what, got, c.complete)
		}
		if !slices.Equal(res.Positions, c.positions) || res.Epoch != 9 {
			t.Errorf("%s: positions %v epoch %d", c.what, res.Positions, res.Epoch)
		}
	}
}

// While an object is unfound, recovery makes no position complete: a
// stale position's lack of it must not vote it away at the next peering.
func TestAfterRecoveryWithUnfound(t *testing.T) {
	acting := []clustermap.OSDID{1, 2, 3}
	ps := Primary{Acting: acting, WriteSet: acting, Complete: []clustermap.OSDID{1, 2}, Missing: map[clustermap.OSDID]map[string]struct{}{}, Unfound: map[string]struct{}{"w": {}}}
	if complete, _, all, changed := ps.AfterRecovery(); changed || all || len(complete) != 2 {
		t.Fatalf("with an object unfound: complete %v, all %v, changed %v", complete, all, changed)
	}
	ps.Unfound = nil
	if complete, _, all, changed := ps.AfterRecovery(); !changed || !all || len(complete) != 3 {
		t.Fatalf("with nothing unfound: complete %v, all %v, changed %v", complete, all, changed)
	}
}

// The write hole that rollback closes: a put cut short leaves its new
// version on fewer than K positions and the acknowledged one on the
// others; the positions it reached roll back, so the acknowledged version
// stands (before rollback, neither version was on K voters: unfound).
func TestDecideShardsPGRollBack(t *testing.T) {
	v := func(n uint64) EVersion { return EVersion{1, n} }
	at := func(ver uint64) ObjState { return ObjState{Ver: v(ver)} }
	over := func(ver, prev uint64) ObjState { return ObjState{Ver: v(ver), Prev: v(prev), CanRollBack: true} }
	list := func(st ObjState) *Listing { return &Listing{Objs: map[string]ObjState{"w": st}} }
	ids := func(o ...clustermap.OSDID) []clustermap.OSDID { return o }
	cases := []struct {
		what      string
		k         int
		positions []clustermap.OSDID
		rec       *Record
		lists     []*Listing
		want      ShardsOutcome
	}{
		{"2+1, min_size 2: one position stale, a put cut short on one of the two others", 2, ids(1, 2, 3),
			&Record{Acting: ids(2, 3), Complete: ids(2, 3), Positions: ids(1, 2, 3)},
			[]*Listing{list(at(1)), list(over(3, 2)), list(over(2, 1))},
			ShardsOutcome{Missing: "map[osd.1:map[w:{}]]", RollBacks: "map[osd.2:[{w 1'3 1'2}]]", Unfound: "map[]", Complete: "[osd.2 osd.3]", Trims: "[{w 1'2}]"}},
		{"4+2: a put reaching 3 positions rolls back there", 4, ids(1, 2, 3, 4, 5, 6),
			&Record{Acting: ids(1, 2, 3, 4, 5, 6), Complete: ids(1, 2, 3, 4, 5, 6), Positions: ids(1, 2, 3, 4, 5, 6)},
			[]*Listing{list(over(2, 1)), list(over(2, 1)), list(over(2, 1)), list(at(1)), list(at(1)), list(at(1))},
			ShardsOutcome{Missing: "map[]", RollBacks: "map[osd.1:[{w 1'2 1'1}] osd.2:[{w 1'2 1'1}] osd.3:[{w 1'2 1'1}]]", Unfound: "map[]", Complete: "[osd.1 osd.2 osd.3 osd.4 osd.5 osd.6]", Trims: "[]"}},
		{"a create cut short goes: the shard rolls back to absent", 2, ids(1, 2, 3), nil,
			[]*Listing{list(ObjState{Ver: v(4), CanRollBack: true}), list(ObjState{}), list(ObjState{})},
			ShardsOutcome{Missing: "map[]", RollBacks: "map[osd.1:[{w 1'4 0'0}]]", Unfound: "map[]", Complete: "[osd.1 osd.2 osd.3]", Trims: "[]"}},
		{"a delete on K positions stands; its tombstones are trimmed once clean", 2, ids(1, 2, 3), nil,
			[]*Listing{list(over(5, 3)), list(over(5, 3)), list(at(3))},
			ShardsOutcome{Missing: "map[osd.3:map[w:{}]]", RollBacks: "map[]", Unfound: "map[]", Complete: "[osd.1 osd.2]", Trims: "[{w 1'5}]"}},
		{"trims of a delete lost on one position, then a put cut short: the tombstone and the absent shard agree", 2, ids(1, 2, 3), nil,
			[]*Listing{list(ObjState{Ver: v(6), CanRollBack: true}), list(ObjState{}), list(ObjState{Ver: v(5), Prev: v(3), CanRollBack: true, Tombstone: true})},
			ShardsOutcome{Missing: "map[]", RollBacks: "map[osd.1:[{w 1'6 0'0}]]", Unfound: "map[]", Complete: "[osd.1 osd.2 osd.3]", Trims: "[{w 1'5}]"}},
		{"a stale position's rollback state is no vote", 2, ids(1, 2, 3),
			&Record{Acting: ids(2, 3), Complete: ids(2, 3), Positions: ids(1, 2, 3)},
			[]*Listing{list(over(3, 2)), list(over(3, 2)), list(at(2))},
			ShardsOutcome{Missing: "map[osd.1:map[w:{}]]", RollBacks: "map[osd.2:[{w 1'3 1'2}]]", Unfound: "map[]", Complete: "[osd.2 osd.3]", Trims: "[]"}},
	}
	for _, c := range cases {
		res, err := DecideShardsPG(1, 9, c.k, c.positions, c.rec, c.lists)
		if err != nil {
			t.Errorf("%s: %v", c.what, err)
			continue
		}
		got := ShardsOutcome{Missing: fmt.Sprint(res.Missing), RollBacks: fmt.Sprint(res.RollBacks), Unfound: fmt.Sprint(res.Unfound), Complete: fmt.Sprint(res.Complete), Trims: fmt.Sprint(res.Trims)}
		if got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.what, got, c.want)
		}
	}
}

// ShardsOutcome is DecideShardsPG's outcome as text, for comparing.
type ShardsOutcome struct{ Missing, RollBacks, Unfound, Complete, Trims string }
