package objstore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	randv2 "math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Every test of the package checks the checksums finalize takes early, and
// zero-fills new WAL files as on a disk.
func init() { verifySums, testLogSegment, filterMinKeys = true, 1<<20, 256 }

// mobj is the oracle's view of one object.
type mobj struct {
	data   []byte
	xattrs map[string]string
	omap   map[string]string
}

type oracle map[string]map[string]*mobj // coll -> name -> object

func (m oracle) obj(coll, name string, create bool) *mobj {
	if m[coll] == nil {
		if !create {
			return nil
		}
		m[coll] = map[string]*mobj{}
	}
	o := m[coll][name]
	if o == nil && create {
		o = &mobj{xattrs: map[string]string{}, omap: map[string]string{}}
		m[coll][name] = o
	}
	return o
}

func (m oracle) apply(o *op) {
	switch o.typ {
	case opRename:
		m[o.coll][string(o.key)] = m[o.coll][o.name]
		delete(m[o.coll], o.name)
		return
	case opDelete:
		if m[o.coll] != nil {
			delete(m[o.coll], o.name)
			if len(m[o.coll]) == 0 {
				delete(m, o.coll)
			}
		}
		return
	case opRmXattr, opOmapRm, opOmapRmRange:
		ob := m.obj(o.coll, o.name, false)
		if ob == nil {
			return
		}
		switch o.typ {
		case opRmXattr:
			delete(ob.xattrs, string(o.key))
		case opOmapRm:
			delete(ob.omap, string(o.key))
		default:
			for k := range ob.omap {
				if k >= string(o.key) && (!o.hasEnd || k < string(o.end)) {
					delete(ob.omap, k)
				}
			}
		}
		return
	}
	ob := m.obj(o.coll, o.name, true)
	switch o.typ {
	case opWrite:
		end := int(o.off) + len(o.data)
		if end > len(ob.data) {
			ob.data = append(ob.data, make([]byte, end-len(ob.data))...)
		}
		copy(ob.data[o.off:], o.data)
	case opPut:
		ob.data = append([]byte{}, o.data...)
	case opTruncate:
		if int(o.off) < len(ob.data) {
			ob.data = ob.data[:o.off]
		} else {
			ob.data = append(ob.data, make([]byte, int(o.off)-len(ob.data))...)
		}
	case opSetXattr:
		ob.xattrs[string(o.key)] = string(o.data)
	case opOmapSet:
		ob.omap[string(o.key)] = string(o.data)
	}
}

func randOp(r *rand.Rand, colls, names []string) op {
	o := op{coll: colls[r.Intn(len(colls))], name: names[r.Intn(len(names))]}
	size := func() int {
		switch r.Intn(10) {
		case 0:
			return 0
		case 1, 2:
			return InlineMax - 2000 + r.Intn(4000)
		case 3:
			return 150<<10 + r.Intn(200<<10)
		default:
			return r.Intn(3 * blockSize)
		}
	}
	data := func(n int) []byte {
		b := make([]byte, n)
		r.Read(b)
		if r.Intn(4) == 0 {
			clear(b[:n/2]) // zero runs look like sparse holes
		}
		return b
	}
	key := func() []byte { return []byte(fmt.Sprintf("k%d", r.Intn(12))) }
	switch r.Intn(16) {
	case 0, 1, 2, 3:
		o.typ, o.off, o.data = opWrite, uint64(r.Intn(400<<10)), data(size())
		switch r.Intn(4) {
		case 0:
			o.off = uint64(r.Intn(80 << 10))
		case 1: // aligned writes of one object that continue each other (seqstream.go)
			o.coll, o.name, o.off, o.data = colls[0], names[0], uint64(8+r.Intn(3))*16<<10, data(16<<10)
		}
	case 4, 5:
		o.typ, o.data = opPut, data(size())
	case 6, 7:
		o.typ, o.off = opTruncate, uint64(size())
		if r.Intn(2) == 0 {
			o.off = uint64(r.Intn(400 << 10))
		}
	case 8:
		o.typ = opCreate
	case 9:
		o.typ = opDelete
	case 10:
		o.typ, o.key, o.data = opSetXattr, []byte(fmt.Sprintf("x%d", r.Intn(4))), data(r.Intn(20))
	case 11:
		o.typ, o.key = opRmXattr, []byte(fmt.Sprintf("x%d", r.Intn(4)))
	case 12, 13:
		o.typ, o.key, o.data = opOmapSet, key(), data(r.Intn(30))
	case 14:
		o.typ, o.key = opOmapRm, key()
	case 15:
		o.typ, o.key = opOmapRmRange, key()
		if r.Intn(2) == 0 {
			o.hasEnd, o.end = true, key()
		}
	}
	return o
}

func compareStore(t *testing.T, r *rand.Rand, s *Store, m oracle, colls, names []string) {
	t.Helper()
	for _, c := range colls {
		for _, n := range names {
			ob := m.obj(c, n, false)
			got, err := s.Read(c, n, 0, 0)
			if ob == nil {
				if err == nil {
					t.Fatalf("%s/%s exists in store, not in oracle", c, n)
				}
				continue
			}
			if err != nil {
				t.Fatalf("read %s/%s: %v", c, n, err)
			}
			if !bytes.Equal(got, ob.data) {
				t.Fatalf("%s/%s: content differs (store %d bytes, oracle %d)", c, n, len(got), len(ob.data))
			}
			// A client's read, twice: the second comes from the read
			// cache if the object is large, and must be just as current.
			for range 2 {
				got, _, sums, release, err := s.ReadShared(c, n, 0, 0)
				if err != nil || !bytes.Equal(got, ob.data) {
					t.Fatalf("shared read %s/%s: %v, content equal %v", c, n, err, bytes.Equal(got, ob.data))
				}
				for i, sum := range sums {
					if sum != blockCRC(got[i*blockSize:(i+1)*blockSize]) {
						t.Fatalf("shared read %s/%s: block %d has a wrong checksum", c, n, i)
					}
				}
				release()
			}
			if len(ob.data) > 0 {
				off := uint64(r.Intn(len(ob.data) + 10))
				ln := uint64(r.Intn(3*blockSize + 1))
				got, err := s.Read(c, n, off, ln)
				want := []byte{}
				if off < uint64(len(ob.data)) {
					end := min(uint64(len(ob.data)), off+ln)
					if ln == 0 {
						end = uint64(len(ob.data))
					}
					want = ob.data[off:end]
				}
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%s/%s range [%d,+%d): %v", c, n, off, ln, err)
				}
			}
			info, err := s.Stat(c, n)
			if err != nil || info.Size != uint64(len(ob.data)) {
				t.Fatalf("stat %s/%s: %+v %v", c, n, info, err)
			}
			xa, err := s.Xattrs(c, n)
			if err != nil || len(xa) != len(ob.xattrs) {
				t.Fatalf("xattrs %s/%s: %v %v", c, n, xa, err)
			}
			for k, v := range ob.xattrs {
				if string(xa[k]) != v {
					t.Fatalf("xattr %s of %s/%s", k, c, n)
				}
			}
			keys := make([]string, 0, len(ob.omap))
			for k := range ob.omap {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			start := fmt.Sprintf("k%d", r.Intn(12))
			limit := r.Intn(5)
			var want []string
			for _, k := range keys {
				if k >= start {
					want = append(want, k)
				}
			}
			wantMore := limit > 0 && len(want) > limit
			if wantMore {
				want = want[:limit]
			}
			kvs, more, err := s.OmapList(c, n, []byte(start), nil, limit)
			if err != nil || more != wantMore || len(kvs) != len(want) {
				t.Fatalf("omaplist %s/%s from %s limit %d: %d %v %v want %v", c, n, start, limit, len(kvs), more, err, want)
			}
			for i, kv := range kvs {
				if string(kv.Key) != want[i] || string(kv.Value) != ob.omap[want[i]] {
					t.Fatalf("omap entry %d of %s/%s", i, c, n)
				}
			}
		}
		var want []string
		for n := range m[c] {
			want = append(want, n)
		}
		sort.Strings(want)
		got, _, err := s.List(c, "", 0)
		if err != nil || strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("list %s: %v want %v (%v)", c, got, want, err)
		}
		if len(want) > 0 {
			after := want[r.Intn(len(want))]
			got, more, _ := s.List(c, after, 1)
			i := slices.Index(want, after) + 1
			if (i < len(want)) != (len(got) == 1) || (len(got) == 1 && got[0] != want[i]) || more != (i+1 < len(want)) {
				t.Fatalf("list %s after %s: %v %v", c, after, got, more)
			}
		}
	}
	var wantColls []string
	for c := range m {
		wantColls = append(wantColls, c)
	}
	sort.Strings(wantColls)
	got, err := s.Collections()
	if err != nil || strings.Join(got, ",") != strings.Join(wantColls, ",") {
		t.Fatalf("collections %v want %v", got, wantColls)
	}
	u, _ := s.Usage()
	var nobj, nbytes int64
	for _, objs := range m {
		for _, o := range objs {
			nobj++
			nbytes += int64(len(o.data))
		}
	}
	if u.Objects != nobj || u.DataBytes != nbytes {
		t.Fatalf("usage %+v, oracle %d objects %d bytes", u, nobj, nbytes)
	}
}

func TestModelRandomized(t *testing.T) {
	seeds := []int64{1, 2, 3}
	if env := os.Getenv("OBJSTORE_SEED"); env != "" {
		v, _ := strconv.ParseInt(env, 10, 64)
		seeds = []int64{v}
	} else {
		seeds = append(seeds, time.Now().UnixNano())
	}
	steps := 250
	if testing.Short() {
		steps = 80
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Logf("seed %d (rerun with OBJSTORE_SEED=%d)", seed, seed)
			runModel(t, seed, steps, 0)
		})
	}
}

// TestModelWriteback runs the model with a small write-back area: the
// destager runs both on its own and at random steps, back-pressure holds
// writers, the area is turned off (drained) and on again, and the store
// is reopened after clean closes and power losses with blocks in the area.
func TestModelWriteback(t *testing.T) {
	defer func(d time.Duration) { wbIdlePause = d }(wbIdlePause)
	// Long enough that blocks stay in the area across reads and reopens;
	// the area is small enough that writers fill it and are held.
	wbIdlePause = 200 * time.Millisecond
	seeds := []int64{1, 2, time.Now().UnixNano()}
	if env := os.Getenv("OBJSTORE_SEED"); env != "" {
		v, _ := strconv.ParseInt(env, 10, 64)
		seeds = []int64{v}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Logf("seed %d (rerun with OBJSTORE_SEED=%d)", seed, seed)
			runModel(t, seed, 250, 48<<10)
		})
	}
}

// openModel opens the model's store, with a write-back area of wb bytes.
func openModel(t *testing.T, fs vfs.FS, wb int64) *Store {
	t.Helper()
	s, err := Open(Options{Dir: "/osd", FS: fs, ReserveBytes: -1, DataCacheBytes: 2 << 20, WritebackBytes: wb, SequentialCutoff: 16 << 10})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

// modelWriteback runs, at some steps of a model with a write-back area, a
// destage pass or a switch of the area off or on.
func modelWriteback(t *testing.T, r *rand.Rand, s *Store, step int) {
	switch r.Intn(12) {
	case 0:
		if _, err := s.destagePass(); err != nil {
			t.Fatalf("step %d destage: %v", step, err)
		}
	case 1:
		on := !s.Writeback().On
		if err := s.SetWriteback(on); err != nil {
			t.Fatal(err)
		}
		if !on && r.Intn(2) == 0 && !s.waitDrained(10*time.Second) {
			t.Fatalf("step %d: the area did not drain: %+v", step, s.Writeback())
		}
	}
}

// randRename returns, now and then, a rename of an object the oracle
// holds to another name of its collection, to start a transaction with.
func randRename(r *rand.Rand, m oracle, colls, names []string) (op, bool) {
	if r.Intn(6) != 0 {
		return op{}, false
	}
	coll := colls[r.Intn(len(colls))]
	from, to := names[r.Intn(len(names))], names[r.Intn(len(names))]
	if from == to || m.obj(coll, from, false) == nil {
		return op{}, false
	}
	return op{typ: opRename, coll: coll, name: from, key: []byte(to)}, true
}

func runModel(t *testing.T, seed int64, steps int, wb int64) {
	r := rand.New(rand.NewSource(seed))
	fs := vfs.NewCrashableMem()
	s := openModel(t, fs, wb)
	cow, hits := int64(0), int64(0)
	var wbWritten, wbDestaged int64
	defer func() {
		t.Logf("%d copy-on-write overwrites", cow+s.cowWrites.Load())
		s.Close()
	}()
	colls := []string{"1.0", "1.0\x00", "2.f"}
	names := []string{"a", "a\x00", "b", "rbd_data.1"}
	m := oracle{}
	for step := 0; step < steps; step++ {
		switch r.Intn(20) {
		case 0:
			if os.Getenv("OBJSTORE_TRACE") != "" {
				t.Logf("step %d: reopen", step)
			}
			cow += s.cowWrites.Load()
			hits += s.idx.hits.Load()
			wbWritten += s.wb.written.Load()
			wbDestaged += s.wb.destaged.Load()
			if r.Intn(2) == 0 {
				// Power loss instead of a clean shutdown: every Apply so far
				// was acknowledged, so the recovered store must match exactly.
				cfg := vfs.CrashCloneCfg{}
				if r.Intn(2) == 0 {
					cfg = vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: randv2.New(randv2.NewPCG(uint64(r.Int63()), 2))}
				}
				clone := fs.CrashClone(cfg)
				s.Close()
				fs = clone
			} else if err := s.Close(); err != nil {
				t.Fatalf("step %d close: %v", step, err)
			}
			s = openModel(t, fs, wb)
		case 1, 2, 3, 4: // (often, so that large overwrites find no pending journal records and copy on write)
			if os.Getenv("OBJSTORE_TRACE") != "" {
				t.Logf("step %d: checkpoint", step)
			}
			if err := s.checkpoint(); err != nil {
				t.Fatalf("checkpoint: %v", err)
			}
		}
		if wb > 0 {
			modelWriteback(t, r, s, step)
		}
		var tx Txn
		var ops []op
		if o, ok := randRename(r, m, colls, names); ok {
			tx.add(o)
			ops = append(ops, o)
		}
		for n := 1 + r.Intn(4); n > 0; n-- {
			o := randOp(r, colls, names)
			tx.add(o)
			ops = append(ops, o)
		}
		// Marshal round trip: replicas apply what the primary shipped.
		tx2, err := UnmarshalTxn(tx.Marshal())
		if err != nil {
			t.Fatalf("step %d: unmarshal: %v", step, err)
		}
		if err := s.Apply(tx2); err != nil {
			t.Fatalf("step %d: apply: %v", step, err)
		}
		for i := range ops {
			m.apply(&ops[i])
			if os.Getenv("OBJSTORE_TRACE") != "" {
				o := &ops[i]
				t.Logf("step %d: %s %q/%q off=%d len=%d key=%q end=%q/%v", step, opNames[o.typ], o.coll, o.name, o.off, len(o.data), o.key, o.end, o.hasEnd)
			}
		}
		compareStore(t, r, s, m, colls, names)
		checkIndexCache(t, s)
	}
	if hits+s.idx.hits.Load() == 0 {
		t.Fatal("the index cache never answered a lookup")
	}
	if wb > 0 {
		st := s.Writeback()
		wbWritten += st.Written
		wbDestaged += st.Destaged
		t.Logf("write-back area: %d bytes written, %d destaged; at the end %+v", wbWritten, wbDestaged, st)
		if wbWritten == 0 || wbDestaged == 0 {
			t.Error("the write-back area was not used, or never destaged")
		}
	}
}

// checkIndexCache asserts the cache's invariant: every entry is its key's
// committed value.
func checkIndexCache(t *testing.T, s *Store) {
	t.Helper()
	s.idx.mu.RLock()
	defer s.idx.mu.RUnlock()
	for k, v := range s.idx.m {
		got, err := s.get([]byte(k))
		if v == nil && errors.Is(err, pebble.ErrNotFound) {
			continue // known absent, and absent
		}
		if err != nil || v == nil || !bytes.Equal(got, v) {
			t.Fatalf("index cache holds %x = %x, the store %x (%v)", k, v, got, err)
		}
	}
}
