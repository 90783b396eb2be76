package e2e

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/ec"
	"github.com/cairn-storage/cairn/internal/placement"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/cairn-storage/cairn/internal/rpc"
)

// TestECStagedPut: a put of at least client.MinStaged bytes to an
// erasure-coded pool goes as shards to each position and a small put to
// the primary (the OSDs count the stages), and reads back; puts that
// cannot find their staged shards are refused with StatusNoStage and
// leave either the old object or the whole new one, never a mix; bad
// stages are refused by name.
func TestECStagedPut(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{metrics: true})
	p, _ := c.createECPool(t, "ec21", "2+1")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	const stages = `cairn_osd_requests_total{op="stage",osd="%s"}`
	before := osdMetricSum(t, c, stages)
	sizes := map[string]int{"min": client.MinStaged, "four": 4 << 20, "odd": 4<<20 + 12345, "over": client.MaxChunk + 5}
	for name, size := range sizes {
		if err := p.Put(ctx, name, payload(name, 0, size)); err != nil {
			t.Fatalf("put %s (%d bytes): %v", name, size, err)
		}
	}
	if got := osdMetricSum(t, c, stages) - before; got != float64(3*len(sizes)) {
		t.Fatalf("%d puts to a 2+1 pool staged %v shards, want %d", len(sizes), got, 3*len(sizes))
	}
	for name, size := range sizes {
		if got, err := p.Get(ctx, name); err != nil || !bytes.Equal(got, payload(name, 0, size)) {
			t.Fatalf("get %s: %v (%d bytes, want %d)", name, err, len(got), size)
		}
	}

	r := newStager(t, c, "ec21")
	old := payload("raw", 0, 2<<20)
	if err := p.Put(ctx, "raw", old); err != nil {
		t.Fatal(err)
	}
	// No shard staged under the token: refused before anything is sent.
	if st := r.put(ctx, "raw", "never-staged", len(old)); st != proto.StatusNoStage {
		t.Fatalf("a staged put of shards never staged: %v, want %v", st, proto.StatusNoStage)
	}
	wantObject(t, p, "raw", old)
	// Every position but the last staged: the put is refused, and the
	// object is the old one or the whole new one.
	next := payload("raw", 1, 2<<20)
	shards := r.encode(next)
	for i := range len(shards) - 1 {
		if st := r.stage(ctx, "raw", "most", i, shards[i]); st != proto.StatusOK {
			t.Fatalf("stage of position %d: %v", i, st)
		}
	}
	if st := r.put(ctx, "raw", "most", len(next)); st != proto.StatusNoStage {
		t.Fatalf("a staged put missing one position's shard: %v, want %v", st, proto.StatusNoStage)
	}
	got, err := p.Get(ctx, "raw")
	if err != nil || !bytes.Equal(got, old) && !bytes.Equal(got, next) {
		t.Fatalf("after a staged put refused half-way: %v, %d bytes, neither the old object nor the new", err, len(got))
	}
	t.Logf("after a staged put refused half-way the object is the %s one", map[bool]string{true: "old", false: "new"}[bytes.Equal(got, old)])
	// The object takes puts again, whole and staged.
	if err := p.Put(ctx, "raw", payload("raw", 2, 3<<20)); err != nil {
		t.Fatalf("put after a refused staged put: %v", err)
	}
	wantObject(t, p, "raw", payload("raw", 2, 3<<20))

	// Stages that cannot be: at another position than the OSD holds, a
	// token too long, a replicated pool; a staged put carrying data.
	for what, st := range map[string]proto.Status{
		"at another position": r.stageAt(ctx, r.osds[0], "raw", "x", 1, shards[1]),
		"with a long token":   r.stage(ctx, "raw", string(make([]byte, 65)), 0, shards[0]),
	} {
		if st == proto.StatusOK {
			t.Errorf("a stage %s was taken", what)
		}
	}
	if st := r.call(ctx, r.osds[0], &proto.Request{Op: proto.OpPut, Flags: proto.FlagStaged, Object: "raw", Key: "t", Data: []byte("x"), Length: 1}); st != proto.StatusInvalid {
		t.Errorf("a staged put with data: %v, want %v", st, proto.StatusInvalid)
	}
	rep := newStager(t, c, "default")
	if st := rep.stage(ctx, "raw", "t", 0, []byte("x")); st != proto.StatusInvalid {
		t.Errorf("a stage to a replicated pool: %v, want %v", st, proto.StatusInvalid)
	}
	wantObject(t, p, "raw", payload("raw", 2, 3<<20))
}

func wantObject(t *testing.T, p *client.Pool, name string, want []byte) {
	t.Helper()
	got, err := p.Get(context.Background(), name)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("get %s: %v (%d bytes, want %d)", name, err, len(got), len(want))
	}
}

// stager speaks the staged put's messages to a pool's OSDs directly.
type stager struct {
	m     *clustermap.Map
	pool  *clustermap.Pool
	osds  []clustermap.OSDID // object "raw"'s PG's positions (its acting set if replicated)
	peers *rpc.Pool
}

func newStager(t *testing.T, c *cluster, pool string) *stager {
	cfg, err := client.LoadConfig(c.conf)
	if err != nil {
		t.Fatal(err)
	}
	m := currentMap(t, c)
	pl, ok := m.PoolByName(pool)
	if !ok {
		t.Fatalf("no pool %s", pool)
	}
	t2 := placement.NewTable(m)
	osds := t2.Acting(pl, placement.PGOf(pl, "raw"))
	if pl.Erasure() {
		_, osds = t2.Positions(pl, placement.PGOf(pl, "raw"))
	}
	s := &stager{m: m, pool: pl, osds: osds, peers: rpc.NewPool(cfg.ClusterKey)}
	t.Cleanup(func() { s.peers.Close() })
	return s
}

func (s *stager) encode(data []byte) [][]byte {
	c, err := ec.New(ec.LayoutOf(*s.pool.EC))
	if err != nil {
		panic(err)
	}
	shards, err := c.EncodeObject(data)
	if err != nil {
		panic(err)
	}
	return shards
}

func (s *stager) call(ctx context.Context, osd clustermap.OSDID, req *proto.Request) proto.Status {
	o, _ := s.m.OSD(osd)
	req.Epoch, req.PG = s.m.Epoch, placement.PGOf(s.pool, req.Object)
	resp, err := s.peers.Call(ctx, o.Addr, req)
	if err != nil {
		return proto.StatusIOError
	}
	defer resp.Release()
	return resp.Status
}

// stage sends the OSD at position pos its shard.
func (s *stager) stage(ctx context.Context, name, token string, pos int, shard []byte) proto.Status {
	return s.stageAt(ctx, s.osds[pos%len(s.osds)], name, token, pos, shard)
}

// stageAt sends osd a shard of position pos.
func (s *stager) stageAt(ctx context.Context, osd clustermap.OSDID, name, token string, pos int, shard []byte) proto.Status {
	return s.call(ctx, osd, &proto.Request{Op: proto.OpStage, Object: name, Key: token, Limit: uint32(pos), Data: shard})
}

func (s *stager) put(ctx context.Context, name, token string, size int) proto.Status {
	return s.call(ctx, s.osds[0], &proto.Request{Op: proto.OpPut, Flags: proto.FlagStaged, Object: name, Key: token, Length: uint64(size)})
}
