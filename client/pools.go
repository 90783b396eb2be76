package client

import (
	"context"
	"fmt"
	"math/bits"
	"os"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
)

// PoolSpec describes a pool to create.
type PoolSpec struct {
	Name          string
	Size          int    // copies; default 3
	MinSize       int    // default size - size/2
	PGNum         uint32 // 0: chosen from the number of OSDs (about 100 PG copies per OSD)
	Class         string // "", hdd, ssd or nvme
	FailureDomain string // osd, host (default) or rack
	// EC, "K+M", makes the pool erasure-coded: K data and M parity shards
	// per stripe of StripeUnit bytes a chunk (0: 16 KiB); Size is then
	// K+M and MinSize defaults to K+1.
	EC         string
	StripeUnit int
}

// PoolInfo describes an existing pool.
type PoolInfo struct {
	ID            uint32 `json:"id"`
	Name          string `json:"name"`
	Size          int    `json:"size"`
	MinSize       int    `json:"min_size"`
	PGNum         uint32 `json:"pg_num"`
	Class         string `json:"class,omitempty"`
	FailureDomain string `json:"failure_domain"`
	EC            string `json:"ec,omitempty"` // "K+M" of an erasure-coded pool
	StripeUnit    int    `json:"stripe_unit,omitempty"`
	// Protection says in words what the pool survives.
	Protection string `json:"protection"`
}

func infoOf(p *clustermap.Pool) PoolInfo {
	i := PoolInfo{ID: uint32(p.ID), Name: p.Name, Size: p.Size, MinSize: p.MinSize, PGNum: p.PGNum,
		Class: string(p.Class), FailureDomain: p.FailureDomain, Protection: p.Protection()}
	if p.EC != nil {
		i.EC, i.StripeUnit = p.EC.String(), p.EC.StripeUnit
	}
	return i
}

// ExperimentalECEnv, set to 1, lets CreatePool make an erasure-coded pool.
// The OSDs serve only part of what such a pool must do (object data: puts,
// writes at an offset, truncates, deletes and reads, rebuilt from K shards
// when one is lost; creates, xattrs and omap, so volumes; no snapshots,
// guarded omap transactions, backfill or scrub yet), so without it
// CreatePool refuses rather than make a pool most users cannot use.
const ExperimentalECEnv = "CAIRN_EXPERIMENTAL_EC"

// poolOf turns a spec into the pool it asks for, with defaults filled in.
func poolOf(spec PoolSpec) (clustermap.Pool, error) {
	p := clustermap.Pool{
		Name: spec.Name, Size: spec.Size, MinSize: spec.MinSize, PGNum: spec.PGNum,
		Class: clustermap.DeviceClass(spec.Class), FailureDomain: spec.FailureDomain,
	}
	if p.FailureDomain == "" {
		p.FailureDomain = clustermap.DomainHost
	}
	if spec.EC == "" {
		if p.Size == 0 {
			p.Size = 3
		}
		if p.MinSize == 0 {
			p.MinSize = p.Size - p.Size/2
		}
		return p, nil
	}
	if os.Getenv(ExperimentalECEnv) != "1" {
		return p, fmt.Errorf("%w: pool %q: erasure-coded pools are experimental in this version (no snapshots, guarded omap transactions, backfill or scrub yet; set %s=1 to make one anyway); use a replicated pool (--size)", ErrInvalid, p.Name, ExperimentalECEnv)
	}
	e, err := clustermap.ParseECProfile(spec.EC, spec.StripeUnit)
	if err != nil {
		return p, fmt.Errorf("%w: pool %q: %v", ErrInvalid, p.Name, err)
	}
	if p.Size != 0 && p.Size != e.K+e.M {
		return p, fmt.Errorf("%w: pool %q: --size %d contradicts erasure code %s, which has %d shards", ErrInvalid, p.Name, p.Size, e, e.K+e.M)
	}
	p.EC, p.Size = &e, e.K+e.M
	if p.MinSize == 0 {
		p.MinSize = e.K + 1
	}
	return p, nil
}

// AutoPGNum picks a power-of-two PG count giving about 100 PG copies per OSD.
func AutoPGNum(osds, size int) uint32 {
	if osds < 1 {
		osds = 1
	}
	want := uint32(100 * osds / max(size, 1))
	if want < 8 {
		want = 8
	}
	n := uint32(1) << (32 - bits.LeadingZeros32(want-1))
	return min(n, clustermap.MaxPGNum)
}

// CreatePool adds a pool. It fails with a message naming the problem if the
// cluster cannot place size copies in distinct failure domains.
func (c *Client) CreatePool(ctx context.Context, spec PoolSpec) (PoolInfo, error) {
	p, err := poolOf(spec)
	if err != nil {
		return PoolInfo{}, err
	}
	var created clustermap.Pool
	nm, err := c.meta.Update(ctx, func(m *clustermap.Map) error {
		if _, ok := m.PoolByName(p.Name); ok {
			return fmt.Errorf("pool %q: %w", p.Name, ErrExists)
		}
		if p.PGNum == 0 {
			n := 0
			for _, o := range m.OSDs {
				if o.In && (p.Class == "" || o.Class == p.Class) {
					n++
				}
			}
			p.PGNum = AutoPGNum(n, p.Size)
		}
		if err := clustermap.ValidatePool(&p); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		if d := m.CountDomains(p.FailureDomain, p.Class); d < p.Size {
			class := ""
			if p.Class != "" {
				class = " of class " + string(p.Class)
			}
			if p.FailureDomain == clustermap.DomainOSD {
				class += " (OSDs whose index shares one flash device count once)"
			}
			return fmt.Errorf("%w: pool %q wants %d %s in distinct %ss, but the cluster has only %d %s(s) with OSDs%s in it",
				ErrInvalid, p.Name, p.Size, p.Unit(), p.FailureDomain, d, p.FailureDomain, class)
		}
		p.ID = m.NextPoolID
		m.NextPoolID++
		m.Pools = append(m.Pools, p)
		created = p
		return nil
	})
	if err != nil {
		return PoolInfo{}, err
	}
	c.view.WaitFor(ctx, nm.Epoch, 10*time.Second)
	return infoOf(&created), nil
}

// DeletePool removes a pool from the map. Its data becomes unreachable;
// the OSDs reclaim it in the background.
func (c *Client) DeletePool(ctx context.Context, name string) error {
	var id clustermap.PoolID
	nm, err := c.meta.Update(ctx, func(m *clustermap.Map) error {
		for i := range m.Pools {
			if m.Pools[i].Name == name {
				id = m.Pools[i].ID
				m.Pools = append(m.Pools[:i], m.Pools[i+1:]...)
				return nil
			}
		}
		return fmt.Errorf("pool %q: %w", name, ErrPoolNotFound)
	})
	if err != nil {
		return err
	}
	if err := c.meta.DeletePGRecords(ctx, id); err != nil {
		return err
	}
	c.view.WaitFor(ctx, nm.Epoch, 10*time.Second)
	return nil
}

// Pools lists the pools of the newest map.
func (c *Client) Pools() []PoolInfo {
	m := c.view.Map()
	out := make([]PoolInfo, 0, len(m.Pools))
	for i := range m.Pools {
		out = append(out, infoOf(&m.Pools[i]))
	}
	return out
}

// Pool is a handle for object operations in one pool.
type Pool struct {
	c    *Client
	id   clustermap.PoolID
	name string
	// snapSeq is sent with every write (WithSnapSeq); snap makes reads
	// and stats see that snapshot and refuses writes (AtSnap).
	snapSeq, snap uint64
}

// Pool returns a handle for the named pool. A pool this client's map does
// not hold yet (another client created it a moment ago, and the new map
// is still on its way here: a gateway asked for a volume just created) is
// looked up in the newest map in etcd, which the client then takes.
func (c *Client) Pool(name string) (*Pool, error) {
	p, ok := c.view.Map().PoolByName(name)
	if !ok {
		p, ok = c.newestPool(name)
	}
	if !ok {
		return nil, fmt.Errorf("pool %q: %w (cairn pool ls lists the pools)", name, ErrPoolNotFound)
	}
	return &Pool{c: c, id: p.ID, name: name}, nil
}

// newestPool reads the newest map from etcd into the client's view and
// looks name up there.
func (c *Client) newestPool(name string) (*clustermap.Pool, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, _, err := c.meta.Map(ctx)
	if err != nil {
		return nil, false
	}
	c.view.Offer(m)
	return c.view.Map().PoolByName(name)
}

// Name returns the pool's name.
func (p *Pool) Name() string { return p.name }

// Info returns the pool's current settings.
func (p *Pool) Info() (PoolInfo, error) {
	pool, ok := p.c.view.Map().Pool(p.id)
	if !ok {
		return PoolInfo{}, fmt.Errorf("pool %q: %w", p.name, ErrPoolNotFound)
	}
	return infoOf(pool), nil
}

// ID returns the pool's number, which never changes (names could).
func (p *Pool) ID() uint32 { return uint32(p.id) }

// Client returns the client the pool handle belongs to.
func (p *Pool) Client() *Client { return p.c }
