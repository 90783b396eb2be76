package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
)

// TestWritebackArea: OSDs with a write-back area take small random
// overwrites into it; an OSD SIGKILLed right after them comes back with
// every acknowledged write (a deep scrub finds its copies equal to the
// others'); `cairn osd writeback off` drains every area to the data disks
// and keeps new writes out of it, and `on` takes them again; the data
// reads back throughout.
func TestWritebackArea(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{writeback: "64M"})
	p := c.pool("default")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	model := map[string][]byte{}
	for i := range 4 {
		name := fmt.Sprintf("disk%d", i)
		model[name] = payload(name, 0, 4<<20)
		if err := p.Put(ctx, name, model[name]); err != nil {
			t.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(7, 7))
	overwrite := func(n int) {
		t.Helper()
		for i := range n {
			name := fmt.Sprintf("disk%d", r.IntN(4))
			off := r.IntN(1024) * 4096
			blk := payload(name, i+1, 4096)
			if err := p.WriteAt(ctx, name, uint64(off), blk); err != nil {
				t.Fatalf("write %s at %d: %v", name, off, err)
			}
			copy(model[name][off:], blk)
		}
	}
	readBack := func(when string) {
		t.Helper()
		for name, want := range model {
			if got, err := p.Get(ctx, name); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: get %s: %v (equal %v)", when, name, err, bytes.Equal(got, want))
			}
		}
	}
	rows := func() []map[string]any {
		out, err := c.cli(nil, "osd", "df", "--json")
		var rs []map[string]any
		if err != nil || json.Unmarshal(out, &rs) != nil {
			t.Fatalf("osd df --json: %v\n%s", err, out)
		}
		return rs
	}
	for _, row := range rows() {
		if row["writeback_area_bytes"] != float64(64<<20) && row["reported"] == true {
			t.Fatalf("osd df: an OSD without its 64 MiB area: %v", row)
		}
	}
	overwrite(600)
	var dirty float64
	for _, row := range rows() {
		dirty += row["writeback_dirty_bytes"].(float64)
	}
	t.Logf("the areas held %.0f KiB (as last published) when osd.0 was SIGKILLed", dirty/1024)
	c.kill("osd.0")
	c.restart("osd.0")
	c.waitHealthy(60*time.Second, "with osd.0 back after a SIGKILL")
	readBack("after osd.0 was SIGKILLed with writes in its area")
	deepScrubClean(t, c)

	args := []string{"osd", "writeback", "off"}
	for i := range c.hosts * c.perHost {
		args = append(args, fmt.Sprint(i))
	}
	if out, err := c.cli(nil, args...); err != nil {
		t.Fatalf("osd writeback off: %v\n%s", err, out)
	}
	waitRows(t, rows, 30*time.Second, "every area off and drained", func(row map[string]any) bool {
		return row["writeback_off"] == true && row["writeback_dirty_bytes"] == float64(0)
	})
	overwrite(200)
	time.Sleep(3 * time.Second) // two rounds of stats
	waitRows(t, rows, time.Second, "the areas still empty after writes while off", func(row map[string]any) bool {
		return row["writeback_dirty_bytes"] == float64(0)
	})
	readBack("with the areas off")
	args[2] = "on"
	if out, err := c.cli(nil, args...); err != nil {
		t.Fatalf("osd writeback on: %v\n%s", err, out)
	}
	waitRows(t, rows, 30*time.Second, "every area on again", func(row map[string]any) bool { return row["writeback_off"] == false })
	overwrite(200)
	readBack("with the areas on again")
	deepScrubClean(t, c)
}

// waitRows waits until every reported row of `cairn osd df` meets cond.
func waitRows(t *testing.T, rows func() []map[string]any, timeout time.Duration, what string, cond func(map[string]any) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var bad map[string]any
		for _, row := range rows() {
			if row["reported"] == true && !cond(row) {
				bad = row
				break
			}
		}
		if bad == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("osd df never showed %s within %s: %v", what, timeout, bad)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// deepScrubClean deep-scrubs the pool default and wants no copy differing.
func deepScrubClean(t *testing.T, c *cluster) {
	t.Helper()
	out, err := c.cli(nil, "scrub", "--deep", "--json", "default")
	var res client.ScrubResult
	if err != nil || json.Unmarshal(out, &res) != nil || res.Errors != 0 || res.Objects < 4 {
		t.Fatalf("deep scrub: %v %+v\n%s", err, res, out)
	}
}
