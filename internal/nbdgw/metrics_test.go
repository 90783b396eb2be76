package nbdgw

import (
	"context"
	"errors"
	"flag"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cairn-storage/cairn/internal/metricsrv"
	"github.com/cairn-storage/cairn/internal/nbd"
)

type fakeDevice struct{ failWrites bool }

func (fakeDevice) Size() uint64   { return 1 << 20 }
func (fakeDevice) ReadOnly() bool { return false }
func (fakeDevice) Read(_ context.Context, off uint64, n uint32) ([]nbd.Chunk, error) {
	return []nbd.Chunk{{Data: make([]byte, n)}}, nil
}
func (d fakeDevice) Write(context.Context, uint64, []byte) error {
	if d.failWrites {
		return errors.New("no")
	}
	return nil
}
func (fakeDevice) Zero(context.Context, uint64, uint32, bool) error { return nil }
func (fakeDevice) Trim(context.Context, uint64, uint32) error       { return nil }
func (fakeDevice) Flush(context.Context) error                      { return nil }
func (fakeDevice) Close() error                                     { return nil }

type mappedDevice struct{ fakeDevice }

func (mappedDevice) Extents(_ context.Context, off uint64, n uint32) ([]nbd.Extent, error) {
	return []nbd.Extent{{Length: n, Hole: true}}, nil
}

// Commands are counted per export with their bytes; failures apart; the
// open gauge follows Open and Close; block status survives the wrapper.
func TestMetricsCountCommands(t *testing.T) {
	m := NewMetrics()
	ctx := context.Background()
	d := m.wrap(mappedDevice{}, "default/vm1")
	d.Write(ctx, 0, make([]byte, 4096))
	d.Read(ctx, 0, 8192)
	d.Flush(ctx)
	bad := m.wrap(fakeDevice{failWrites: true}, "default/vm2")
	bad.Write(ctx, 0, make([]byte, 512))
	if _, ok := bad.(nbd.Mapper); ok {
		t.Error("a device without block status gained it through the wrapper")
	}
	mp, ok := d.(nbd.Mapper)
	if !ok {
		t.Fatal("block status lost through the wrapper")
	}
	if ext, _ := mp.Extents(ctx, 0, 4096); len(ext) != 1 || !ext[0].Hole {
		t.Errorf("extents through the wrapper: %+v", ext)
	}
	for _, c := range []struct {
		what string
		got  float64
		want float64
	}{
		{"vm1 writes", testutil.ToFloat64(m.cmds.WithLabelValues("default/vm1", "write")), 1},
		{"vm1 bytes written", testutil.ToFloat64(m.bytes.WithLabelValues("default/vm1", "written")), 4096},
		{"vm1 bytes read", testutil.ToFloat64(m.bytes.WithLabelValues("default/vm1", "read")), 8192},
		{"vm2 failed writes", testutil.ToFloat64(m.failed.WithLabelValues("default/vm2", "write")), 1},
		{"vm2 bytes written", testutil.ToFloat64(m.bytes.WithLabelValues("default/vm2", "written")), 0},
		{"vm1 open", testutil.ToFloat64(m.open.WithLabelValues("default/vm1")), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: %g, want %g", c.what, c.got, c.want)
		}
	}
	d.Close()
	if n := testutil.ToFloat64(m.open.WithLabelValues("default/vm1")); n != 0 {
		t.Errorf("vm1 open after close: %g", n)
	}
}

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/metrics.md's NBD section from the registry")

// TestMetricsDocumented keeps docs/metrics.md's table of the NBD
// gateway's metrics equal to what it serves.
func TestMetricsDocumented(t *testing.T) {
	m := NewMetrics()
	ctx := context.Background()
	d := m.wrap(fakeDevice{failWrites: true}, "default/vm1")
	d.Write(ctx, 0, make([]byte, 4096))
	d.Read(ctx, 0, 4096)
	if err := metricsrv.CheckDoc("../../docs/metrics.md", "nbd", m.Registry, *updateDocs); err != nil {
		t.Fatal(err)
	}
}
