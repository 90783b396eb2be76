package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/powercut"
)

// The cluster power-cut test: a dev cluster whose mon (its etcd) and OSDs
// (their data and index) all live on internal/powercut's filesystem, one
// mount each, served by this process. Clients put, overwrite and delete
// objects of many sizes, set and remove their omap keys, put, overwrite
// and delete objects in an erasure-coded pool (2+1), write to a volume
// and take its snapshots, and record every acknowledgement. While they
// write, one OSD loses power alone (and is SIGKILLed) and starts again on
// what survived, twice, the second time while it recovers and a deep scrub
// runs; then every mount loses power at once (Cut, or CutHarsh with HARSH=1) and every process of the cluster is
// SIGKILLed. The mounts come back with what survived, the cluster starts
// again from it, must reach HEALTH_OK by itself, and every acknowledged
// write must read back exactly: none lost, none torn, no acknowledged
// delete undone. No snapshot of the volume may fail before the cut, and
// once the cluster is back the cut's writer no longer counts in the
// volume's snapshot group and a snapshot succeeds.
//
// CUTS=N cuts of the whole cluster (default 2; `make powercut`: 50),
// HARSH=1 for harsh cuts, POWERCUT_SEED to replay: each cut prints its
// seed, which decides the clients' operations, the OSD cut alone, the
// moments of the cuts (as delays; what the cluster has done by then is
// timing) and the harsh cuts' choices.

// pcState is one state of an object: absent, or data and omap.
type pcState struct {
	exists bool
	data   []byte
	omap   map[string]string
}

// pcObject is what the clients know of one object: its acknowledged state,
// the state of an operation that failed or was cut short (which may or may
// not have landed), and the digests of its earlier acknowledged contents.
type pcObject struct {
	acked   pcState
	pending *pcState
	older   map[[32]byte]bool
}

// pcWorker is one client goroutine's objects: only it touches them while
// the clients run.
type pcWorker struct {
	id      int
	ec      bool // writes to the erasure-coded pool (puts, writes at offsets and deletes; its omap is not checked)
	objects map[string]*pcObject
	acks    int // acknowledged operations since the last check
}

const (
	pcWorkers       = 4        // on the replicated pool; one more on the erasure-coded one
	pcObjectsPerOne = 24       // objects each worker writes
	pcMaxSize       = 2 << 20  // largest object put: past 1 MiB, in buffers past 2 MiB (huge-page backed)
	pcMaxWrite      = 96 << 10 // largest overwrite
)

// run applies random operations to w's objects until ctx ends. An
// operation that fails leaves its object with two possible states, and
// the object is left alone until the next check.
func (w *pcWorker) run(ctx context.Context, p *client.Pool, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), uint64(w.id)))
	for gen := 0; ctx.Err() == nil; gen++ {
		name := fmt.Sprintf("pc-%d-%d", w.id, r.IntN(pcObjectsPerOne))
		o := w.objects[name]
		if o == nil {
			o = &pcObject{older: map[[32]byte]bool{}}
			w.objects[name] = o
		}
		if o.pending != nil {
			continue
		}
		next, do := w.op(r, o.acked, name, int(seed%1_000_000)*1_000_000+gen)
		octx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := do(octx, p)
		cancel()
		if err != nil {
			o.pending = &next
			continue
		}
		if o.acked.exists {
			o.older[digest(o.acked.data)] = true
		}
		o.acked = next
		w.acks++
	}
}

// op draws an operation on an object in state cur: a put of a new content
// (any size up to pcMaxSize, small ones most often), an overwrite of a
// random range (which may extend it), an omap change, or a delete.
func (w *pcWorker) op(r *rand.Rand, cur pcState, name string, gen int) (pcState, func(context.Context, *client.Pool) error) {
	next := pcState{exists: true, data: cur.data, omap: maps.Clone(cur.omap)}
	if next.omap == nil {
		next.omap = map[string]string{}
	}
	k := r.IntN(12)
	if w.ec && k >= 8 && k < 11 {
		k = 0 // no omap changes: the check reads no omap of erasure-coded objects
	}
	switch {
	case !cur.exists || k < 5:
		next.data = payload(name, gen, logUniformSize(r, pcMaxSize))
		return next, func(ctx context.Context, p *client.Pool) error { return p.Put(ctx, name, next.data) }
	case k < 8:
		off := r.IntN(len(cur.data) + 4096)
		patch := payload(name, gen, 1+logUniformSize(r, pcMaxWrite))
		next.data = make([]byte, max(len(cur.data), off+len(patch)))
		copy(next.data, cur.data)
		copy(next.data[off:], patch)
		return next, func(ctx context.Context, p *client.Pool) error {
			return p.WriteAt(ctx, name, uint64(off), patch)
		}
	case k < 10:
		kvs := map[string][]byte{}
		for i := 1 + r.IntN(3); i > 0; i-- {
			key := fmt.Sprint("k", r.IntN(16))
			kvs[key] = payload(name+key, gen, logUniformSize(r, 2048))
			next.omap[key] = string(kvs[key])
		}
		return next, func(ctx context.Context, p *client.Pool) error { return p.OmapSet(ctx, name, kvs) }
	case k < 11:
		key := fmt.Sprint("k", r.IntN(16))
		delete(next.omap, key)
		return next, func(ctx context.Context, p *client.Pool) error { return p.OmapRm(ctx, name, key) }
	default:
		return pcState{}, func(ctx context.Context, p *client.Pool) error { return p.Delete(ctx, name) }
	}
}

// pcCounts are the check's findings.
type pcCounts struct{ checked, lost, torn, resurrected int }

// check reads every object of w back and compares it with what the
// clients were told, then takes what it read as the new acknowledged state.
func (w *pcWorker) check(t *testing.T, p *client.Pool, n *pcCounts) {
	n.checked += w.acks
	w.acks = 0
	for name, o := range w.objects {
		got, err := pcRead(p, name, !w.ec)
		ok := err == nil && (pcSame(got, o.acked) || (o.pending != nil && pcSame(got, *o.pending)))
		switch {
		case ok:
		case err != nil:
			n.torn++
			t.Errorf("%s: unreadable: %v", name, err)
			continue
		case !got.exists:
			n.lost++
			t.Errorf("%s: lost (acknowledged %d bytes)", name, len(o.acked.data))
		case !o.acked.exists && (o.pending == nil || !o.pending.exists):
			n.resurrected++
			t.Errorf("%s: resurrected after an acknowledged delete (%d bytes)", name, len(got.data))
		case digest(got.data) == digest(o.acked.data) || (o.pending != nil && digest(got.data) == digest(o.pending.data)):
			n.lost++
			t.Errorf("%s: its omap lost an acknowledged change: %d keys, acknowledged %d", name, len(got.omap), len(o.acked.omap))
		case o.older[digest(got.data)]:
			n.lost++
			t.Errorf("%s: lost its last acknowledged write (an earlier content, %d bytes, reads back)", name, len(got.data))
		default:
			n.torn++
			t.Errorf("%s: torn: %d bytes that no acknowledged or pending write left (acknowledged %d)", name, len(got.data), len(o.acked.data))
		}
		if o.acked.exists && !pcSame(got, o.acked) {
			o.older[digest(o.acked.data)] = true
		}
		o.acked, o.pending = got, nil
	}
}

func pcSame(a, b pcState) bool {
	return a.exists == b.exists && (!a.exists || digest(a.data) == digest(b.data) && len(a.omap) == len(b.omap) && maps.Equal(a.omap, b.omap))
}

// pcRead reads an object, with its omap if withOmap, retrying what may
// pass (a PG still peering).
func pcRead(p *client.Pool, name string, withOmap bool) (pcState, error) {
	var err error
	for try := 0; try < 10; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var data []byte
		data, err = p.Get(ctx, name)
		omap := map[string]string{}
		if err == nil && withOmap {
			omap, err = pcOmap(ctx, p, name)
		}
		cancel()
		switch {
		case err == nil:
			return pcState{true, data, omap}, nil
		case errors.Is(err, client.ErrNotFound):
			return pcState{}, nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return pcState{}, err
}

// pcOmap reads an object's whole omap.
func pcOmap(ctx context.Context, p *client.Pool, name string) (map[string]string, error) {
	omap := map[string]string{}
	for start := ""; ; {
		kvs, more, err := p.OmapList(ctx, name, start, "", 100)
		if err != nil {
			return nil, err
		}
		for _, kv := range kvs {
			omap[kv.Key] = string(kv.Value)
			start = kv.Key + "\x00"
		}
		if !more || len(kvs) == 0 {
			return omap, nil
		}
	}
}

// pcEnvInt reads an integer from the environment, def if unset.
func pcEnvInt(t *testing.T, name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

func TestPowerCutCluster(t *testing.T) {
	t.Parallel()
	if err := powercut.Available(); err != nil {
		t.Fatal(err)
	}
	cuts := int(pcEnvInt(t, "CUTS", 2))
	harsh := os.Getenv("HARSH") == "1"
	seed := pcEnvInt(t, "POWERCUT_SEED", time.Now().UnixNano())
	t.Logf("run seed %d (POWERCUT_SEED=%d replays the run's seeds; each cut's seed alone: POWERCUT_SEED=<it> CUTS=1)", seed, seed)
	seeds := rand.New(rand.NewPCG(uint64(seed), 0))

	pc := newPCCluster(t)
	c := pc.c
	pool, ecPool := c.pool("default"), pc.ecPool()
	workers := make([]*pcWorker, pcWorkers+1)
	for i := range workers {
		workers[i] = &pcWorker{id: i, ec: i == pcWorkers, objects: map[string]*pcObject{}}
	}
	poolOf := func(w *pcWorker) *client.Pool {
		if w.ec {
			return ecPool
		}
		return pool
	}
	vol := newPCVolume(t, pool)
	var n pcCounts
	ecChecked := 0 // of n.checked, puts and deletes in the erasure-coded pool
	start := time.Now()
	done := 0
	for cut := 0; cut < cuts; cut++ {
		cutSeed := seed
		if cut > 0 {
			cutSeed = int64(seeds.Uint64() >> 1)
		}
		t.Logf("power cut %d of %d: seed %d", cut+1, cuts, cutSeed)
		r := rand.New(rand.NewPCG(uint64(cutSeed), 1))
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, w := range workers {
			wg.Add(1)
			go func() { defer wg.Done(); w.run(ctx, poolOf(w), cutSeed) }()
		}
		wg.Add(1)
		go func() { defer wg.Done(); vol.run(ctx, pool, cutSeed) }()
		scrub := pc.cutOne(ctx, r, harsh, cutSeed)
		time.Sleep(time.Duration(500+r.IntN(2500)) * time.Millisecond)
		vol.cutting.Store(true)
		pc.powerCut(harsh, cutSeed)
		stop()
		wg.Wait()
		<-scrub
		pc.restart()
		vol.cutting.Store(false)
		pool, ecPool = c.pool("default"), c.pool(pcECPool)
		before := n
		for _, w := range workers {
			if w.ec {
				ecChecked += w.acks
			}
			w.check(t, poolOf(w), &n)
		}
		vol.check(t, pool, &n)
		done++
		t.Logf("power cut %d: %d acknowledged writes checked, %d lost, %d torn, %d resurrected (%s so far)",
			cut+1, n.checked-before.checked, n.lost-before.lost, n.torn-before.torn, n.resurrected-before.resurrected,
			time.Since(start).Round(time.Second))
		if n.lost+n.torn+n.resurrected > 0 {
			t.Errorf("replay this cut: POWERCUT_SEED=%d CUTS=1 HARSH=%v", cutSeed, harsh)
			break
		}
	}
	msg := fmt.Sprintf("%d power cuts: %d acknowledged writes checked, %d lost, %d torn, %d resurrected",
		done, n.checked, n.lost, n.torn, n.resurrected)
	for _, name := range pc.names {
		st := pc.mounts[name].Stats()
		t.Logf("%s's disk: %d writes (%d O_DIRECT, %d O_SYNC), %d fsyncs, %d directory syncs, %d punches, %d written back early",
			name, st.Writes, st.DirectWrites, st.SyncWrites, st.Fsyncs, st.DirSyncs, st.Punches, st.ForcedWritebacks)
	}
	t.Logf("volume %s: %d writes and %d snapshots acknowledged", vol.name, vol.writes, vol.snapsTaken)
	t.Logf("erasure-coded pool %s: %d acknowledged puts, writes at offsets and deletes checked, %d shard(s) of writes cut short rolled back by peering", pcECPool, ecChecked, pc.rolledBack())
	if done > 0 && ecChecked == 0 {
		t.Error("no write to the erasure-coded pool was acknowledged: the run checked none")
	}
	t.Log(msg)
	fmt.Println(msg)
	if n.checked == 0 {
		t.Error("no write was acknowledged: the run checked nothing")
	}
	if done > 0 && pc.deepPGs.Load() == 0 {
		t.Error("no deep scrub of a PG finished during the run's recoveries: cutting an OSD during scrub tested nothing")
	}
}

// pcCluster is a dev cluster whose mon and OSDs keep their data on
// power-cut mounts: DIR/mon.a and DIR/osd.N are symbolic links to the
// mounts, moved to the new mount point at each remount.
type pcCluster struct {
	t      *testing.T
	dir    string
	c      *cluster
	names  []string                // mon.a, osd.0, ...
	mounts map[string]*powercut.FS // by process name
	// deepPGs counts the PGs deep-scrubbed during recoveries.
	deepPGs atomic.Int64
}

func newPCCluster(t *testing.T) *pcCluster {
	const hosts = 3
	dir := filepath.Join(t.TempDir(), "dev")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	pc := &pcCluster{t: t, dir: dir, names: []string{"mon.a"}, mounts: map[string]*powercut.FS{}}
	for i := range hosts {
		pc.names = append(pc.names, fmt.Sprintf("osd.%d", i))
	}
	disks := t.TempDir()
	for _, name := range pc.names {
		f := powercut.ForTest(t, filepath.Join(disks, name), powercut.Options{Logf: func(string, ...any) {}})
		pc.mounts[name] = f
		pc.link(name)
	}
	pc.c = startCluster(t, clusterOpts{hosts: hosts, perHost: 1, dir: dir})
	pc.waitHealthy()
	return pc
}

// pcECPool is the power-cut cluster's erasure-coded pool: 2+1, one shard a
// host, min_size 2 (K), so it writes on while one host is cut: the case
// where a put cut short on one of the two positions that took the last
// one leaves the new version on one shard and the acknowledged one on
// the other, which stands because the first rolls back.
const pcECPool = "pcec"

// ecPool creates pcECPool and waits for the cluster to be healthy again.
func (pc *pcCluster) ecPool() *client.Pool {
	p, _ := pc.c.createECPool(pc.t, pcECPool, "2+1", "--min-size", "2")
	pc.waitHealthy()
	return p
}

// rolledBack counts the shards the OSDs' logs say peering rolled back.
func (pc *pcCluster) rolledBack() int {
	n := 0
	for name, p := range pc.c.procs {
		if !strings.HasPrefix(name, "osd.") {
			continue
		}
		log, _ := os.ReadFile(p.Log)
		for _, m := range regexp.MustCompile(`rolled back (\d+) shard\(s\)`).FindAllSubmatch(log, -1) {
			k, _ := strconv.Atoi(string(m[1]))
			n += k
		}
	}
	return n
}

// link points DIR/name at its mount's current mount point.
func (pc *pcCluster) link(name string) {
	path := filepath.Join(pc.dir, name)
	os.Remove(path)
	if err := os.Symlink(pc.mounts[name].Dir(), path); err != nil {
		pc.t.Fatal(err)
	}
}

func (pc *pcCluster) waitHealthy() {
	pc.c.waitStatus(3*time.Minute, "HEALTH_OK", func(st map[string]any, _ string) bool {
		return st["health"] == "HEALTH_OK"
	})
}

// cutOne cuts the power of one OSD alone, twice, while the clients write:
// the OSD is SIGKILLed with the cut and started again on what survived, the
// second time while it peers and recovers and a deep scrub of the pool
// runs. The returned channel closes when the scrub has ended (it ends with
// ctx).
func (pc *pcCluster) cutOne(ctx context.Context, r *rand.Rand, harsh bool, seed int64) <-chan struct{} {
	c := pc.c
	name := pc.names[1+r.IntN(len(pc.names)-1)]
	scrub := make(chan struct{})
	for i := range 2 {
		if i == 1 {
			cmd := exec.CommandContext(ctx, cairnBin, "--conf", c.conf, "scrub", "--deep", "default")
			go func() {
				defer close(scrub)
				out, err := cmd.CombinedOutput()
				if err != nil && ctx.Err() == nil {
					pc.t.Logf("the deep scrub during %s's recovery: %v: %s", name, err, out)
				}
				pgs, objects := pcScrubbed(out)
				pc.t.Logf("the deep scrub during %s's recovery: %d PGs, %d objects", name, pgs, objects)
				pc.deepPGs.Add(int64(pgs))
			}()
		}
		time.Sleep(time.Duration(300+r.IntN(1500)) * time.Millisecond)
		pc.cut(name, harsh, seed+int64(100+i))
		pid := c.procs[name].PID
		syscall.Kill(pid, syscall.SIGKILL)
		pc.waitGone(pid)
		if err := pc.mounts[name].Remount(); err != nil {
			pc.t.Fatalf("remount %s: %v", name, err)
		}
		pc.link(name)
		c.restart(name)
	}
	pc.t.Logf("%s lost power alone twice, the second time while it recovered under a deep scrub", name)
	return scrub
}

// pcScrubRe matches cairn scrub's progress: PGs done, of all, and objects.
var pcScrubRe = regexp.MustCompile(`deep scrub \S+: \S+ (\d+)/\d+ pgs, (\d+) objects`)

// pcScrubbed reads how many PGs and objects a deep scrub had done when it
// ended, from its last progress line.
func pcScrubbed(out []byte) (pgs, objects int) {
	m := pcScrubRe.FindAllSubmatch(out, -1)
	if len(m) == 0 {
		return 0, 0
	}
	last := m[len(m)-1]
	pgs, _ = strconv.Atoi(string(last[1]))
	objects, _ = strconv.Atoi(string(last[2]))
	return pgs, objects
}

// cut cuts one mount's power.
func (pc *pcCluster) cut(name string, harsh bool, seed int64) {
	f := pc.mounts[name]
	var err error
	if harsh {
		_, err = f.CutHarsh(seed)
	} else {
		err = f.Cut()
	}
	if err != nil {
		pc.t.Errorf("cut %s: %v", name, err)
	}
}

// waitGone waits until every thread of process pid has exited.
func (pc *pcCluster) waitGone(pid int) {
	deadline := time.Now().Add(30 * time.Second)
	for !pcGone(pid) {
		if time.Now().After(deadline) {
			pc.t.Fatalf("pid %d still alive 30 s after SIGKILL", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// powerCut cuts every mount's power at once, then SIGKILLs every process
// of the cluster and cairn dev, and waits until they are gone.
func (pc *pcCluster) powerCut(harsh bool, seed int64) {
	var wg sync.WaitGroup
	for i, name := range pc.names {
		wg.Add(1)
		go func() { defer wg.Done(); pc.cut(name, harsh, seed+int64(i)) }()
	}
	wg.Wait()
	c := pc.c
	for _, p := range c.procs {
		syscall.Kill(p.PID, syscall.SIGKILL)
	}
	c.cmd.Process.Kill()
	c.cmd.Wait()
	c.cmd = nil
	for _, p := range c.procs {
		pc.waitGone(p.PID)
	}
}

// pcGone reports whether every thread of process pid has exited. A
// killed process's leader is a zombie while its other threads still exit
// (closing its files, FUSE ones too), and its sockets are open until the
// last one has.
func pcGone(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return true
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X' {
			return false
		}
	}
	return true
}

// restart brings every mount back with what survived and starts the
// cluster again on it; it must reach HEALTH_OK by itself.
func (pc *pcCluster) restart() {
	for _, name := range pc.names {
		f := pc.mounts[name]
		if err := f.Remount(); err != nil {
			pc.t.Fatalf("remount %s: %v", name, err)
		}
		pc.link(name)
	}
	pc.c.start()
	pc.waitHealthy()
}
