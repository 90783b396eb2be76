// Package client is cairn's public Go API, the librados of cairn: it reads
// the cluster map from etcd, computes placement itself and talks straight to
// the primary OSD of each placement group. There is no metadata lookup per IO.
//
//	cfg, _ := client.LoadConfig("")           // --conf, $CAIRN_CONF or ./cairn-dev/cairn.conf
//	c, _ := client.Dial(ctx, cfg)
//	defer c.Close()
//	p, _ := c.Pool("default")
//	p.Put(ctx, "greeting", []byte("hello"))
//
// A Client is safe for concurrent use; many operations share one pipelined
// connection per OSD. Operations retry by themselves across map changes and
// OSD failures until their context ends or Config.OpTimeout passes.
package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/conf"
	"github.com/cairn-storage/cairn/internal/mapview"
	"github.com/cairn-storage/cairn/internal/meta"
	"github.com/cairn-storage/cairn/internal/proto"
	"github.com/cairn-storage/cairn/internal/rpc"
)

// Config is the content of cairn.conf.
type Config = conf.Config

// LoadConfig finds and reads cairn.conf: path if not empty, else
// $CAIRN_CONF, else ./cairn.conf, else ./cairn-dev/cairn.conf.
func LoadConfig(path string) (*Config, error) {
	p, err := conf.Find(path)
	if err != nil {
		return nil, err
	}
	return conf.Load(p)
}

// Errors returned by operations; test with errors.Is.
var (
	ErrNotFound     = errors.New("not found")
	ErrExists       = errors.New("already exists")
	ErrInvalid      = errors.New("invalid request")
	ErrNoSpace      = errors.New("no space left")
	ErrCorrupt      = errors.New("data corrupted on every copy")
	ErrUnavailable  = errors.New("not enough copies available")
	ErrPoolNotFound = errors.New("pool not found")
)

// MaxChunk is the largest payload sent in one request; larger objects are
// written and read in pieces of this size.
const MaxChunk = 16 << 20

// Client is a connection to a cluster.
type Client struct {
	cfg    *Config
	meta   *meta.Store
	view   *mapview.View
	peers  *rpc.Pool
	cancel context.CancelFunc
	// OpTimeout bounds how long one operation keeps retrying when its context
	// has no deadline.
	OpTimeout time.Duration

	suspectMu sync.Mutex
	suspected map[clustermap.OSDID]clustermap.Epoch

	codecs sync.Map // clustermap.ECProfile → *ec.Codec, for staged puts
}

// Dial connects to the cluster described by cfg.
func Dial(ctx context.Context, cfg *Config) (*Client, error) {
	ms, err := meta.ConnectConf(ctx, cfg)
	if err != nil {
		return nil, cfg.ConnectError(err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	view, err := mapview.Follow(wctx, ms)
	if err != nil {
		cancel()
		ms.Close()
		return nil, err
	}
	if view.Map().FSID != cfg.FSID {
		cancel()
		ms.Close()
		return nil, fmt.Errorf("the etcd at %s holds cluster %s, but this cairn.conf is for cluster %s: use the cairn.conf of the cluster you mean",
			strings.Join(cfg.EtcdEndpoints, ", "), view.Map().FSID, cfg.FSID)
	}
	c := &Client{cfg: cfg, meta: ms, view: view, peers: rpc.NewPoolWith(cfg.ClusterKey, rpc.DialOptions{Encrypt: cfg.Encrypt, Local: !cfg.NoLocalSockets}), cancel: cancel, OpTimeout: 2 * time.Minute}
	// Calls waiting on an OSD the map marks down (it may be frozen rather
	// than dead, its socket open) fail now and are sent where the map says.
	view.OnOSDDown(func(_ clustermap.OSDID, addr string) { c.peers.Drop(addr) })
	return c, nil
}

// Close releases all connections.
func (c *Client) Close() error {
	c.cancel()
	c.peers.Close()
	return c.meta.Close()
}

// Epoch returns the epoch of the newest cluster map the client has.
func (c *Client) Epoch() uint64 { return uint64(c.view.Epoch()) }

// statusErr maps a non-OK response to an error wrapping one of the sentinels.
func statusErr(op, pool, obj string, r *proto.Response) error {
	var base error
	switch r.Status {
	case proto.StatusNotFound:
		base = ErrNotFound
	case proto.StatusExists:
		base = ErrExists
	case proto.StatusInvalid:
		base = ErrInvalid
	case proto.StatusNoSpace:
		base = ErrNoSpace
	case proto.StatusCorrupt:
		base = ErrCorrupt
	case proto.StatusUnavailable:
		base = ErrUnavailable
	case proto.StatusPrecondition:
		base = ErrPrecondition
	case proto.StatusNoStage:
		base = errNoStage
	default:
		base = fmt.Errorf("status %d", r.Status)
	}
	if obj == "" {
		return fmt.Errorf("%s %s: %w: %s", op, pool, base, r.Message)
	}
	if r.Status == proto.StatusNotFound && r.Message == proto.MsgNoSuchObject {
		return fmt.Errorf("%s %s/%s: %w: object %q does not exist in pool %q (cairn obj ls %s lists them)", op, pool, obj, base, obj, pool, pool)
	}
	return fmt.Errorf("%s %s/%s: %w: %s", op, pool, obj, base, r.Message)
}

// call sends req to the primary of obj's placement group (or of pg when obj
// is empty), retrying across map changes, OSD failures and unavailability
// until ctx or the op timeout ends.
func (c *Client) call(ctx context.Context, poolID clustermap.PoolID, poolName string, pgSeed *uint32, req *proto.Request) (*proto.Response, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.OpTimeout)
		defer cancel()
	}
	opName := req.Op.String()
	backoff := 20 * time.Millisecond
	var lastErr error
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				if lastErr == nil {
					lastErr = ctx.Err()
				}
				return nil, fmt.Errorf("%s %s/%s: gave up: %w", opName, poolName, req.Object, lastErr)
			case <-time.After(backoff):
			}
			if backoff < time.Second {
				backoff *= 2
			}
			req.Flags |= proto.FlagRetry // an earlier attempt may have applied
		}
		t := c.view.Table()
		m := t.Map()
		pool, ok := m.Pool(poolID)
		if !ok {
			return nil, fmt.Errorf("%s %s: %w", opName, poolName, ErrPoolNotFound)
		}
		var pg clustermap.PGID
		var acting []clustermap.OSDID
		if pgSeed != nil {
			pg = clustermap.PGID{Pool: poolID, Seed: *pgSeed}
			acting = t.Acting(pool, pg)
		} else {
			pg, acting = t.Locate(pool, req.Object)
		}
		if len(acting) == 0 {
			lastErr = fmt.Errorf("%w: pg %s has no OSD up", ErrUnavailable, pg)
			c.view.WaitFor(ctx, m.Epoch+1, time.Second)
			continue
		}
		osd, _ := m.OSD(acting[0])
		req.Epoch, req.PG = m.Epoch, pg
		resp, err := c.peers.Call(ctx, osd.Addr, req)
		if err != nil {
			if errors.Is(err, syscall.ECONNREFUSED) {
				c.suspect(m.Epoch, acting[0], osd.Addr)
			}
			lastErr = fmt.Errorf("%s (%s): %w", acting[0], osd.Addr, err)
			c.view.WaitFor(ctx, m.Epoch+1, time.Second)
			continue
		}
		switch resp.Status {
		case proto.StatusOK:
			return resp, nil
		case proto.StatusWrongEpoch, proto.StatusNotPrimary:
			lastErr = errors.New(resp.Message)
			want := m.Epoch + 1
			if resp.Epoch > want {
				want = resp.Epoch
			}
			if resp.Epoch < m.Epoch {
				continue // the OSD is behind; it catches up by itself
			}
			c.view.WaitFor(ctx, want, 2*time.Second)
			backoff = 20 * time.Millisecond
			continue
		case proto.StatusUnavailable:
			lastErr = statusErr(opName, poolName, req.Object, resp)
			continue
		}
		return resp, statusErr(opName, poolName, req.Object, resp)
	}
}

// suspect ends the liveness lease of an OSD whose address refuses
// connections (its process is gone), once per OSD and map epoch, so that
// it is marked down now rather than when its lease runs out.
func (c *Client) suspect(epoch clustermap.Epoch, osd clustermap.OSDID, addr string) {
	c.suspectMu.Lock()
	if c.suspected == nil {
		c.suspected = map[clustermap.OSDID]clustermap.Epoch{}
	}
	if c.suspected[osd] >= epoch {
		c.suspectMu.Unlock()
		return
	}
	c.suspected[osd] = epoch
	c.suspectMu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.meta.ExpireIfAt(ctx, osd, addr)
	}()
}
