package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
	"github.com/cairn-storage/cairn/internal/volume"
)

// pcVolume is the power-cut clients' volume: writes within one of its
// objects (each one atomic) and a snapshot now and then, with what they
// were told.
type pcVolume struct {
	name    string
	data    []byte            // the acknowledged content
	snaps   map[string][]byte // acknowledged snapshots' contents
	nsnap   int
	pending *pcVolumeWrite // a write that failed: it may have landed
	psnap   string         // a snapshot whose creation failed: it may exist
	pdata   []byte         // the content psnap would hold
	acks    int
	// Totals over the run: acknowledged writes and snapshots.
	writes, snapsTaken int
	snapErr            error // why the last snapshot failed
	// cutting is set while the whole cluster loses power: a snapshot that
	// fails before is a fault (snapErrUp), not the cut's doing.
	cutting   atomic.Bool
	snapErrUp error
}

type pcVolumeWrite struct {
	off  int
	data []byte
}

const (
	pcVolumeSize   = 16 << 20
	pcVolumeObject = 4 << 20
)

func newPCVolume(t *testing.T, p *client.Pool) *pcVolume {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := volume.Create(ctx, p, "pcvol", pcVolumeSize, pcVolumeObject); err != nil {
		t.Fatal(err)
	}
	return &pcVolume{name: "pcvol", data: make([]byte, pcVolumeSize), snaps: map[string][]byte{}}
}

// run writes to the volume until ctx ends or a write fails; every 10th
// operation takes a snapshot (the two newest are kept).
func (v *pcVolume) run(ctx context.Context, p *client.Pool, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 99))
	vol, err := volume.Open(ctx, p, v.name)
	if err != nil {
		return
	}
	defer vol.Close()
	for i := 0; ctx.Err() == nil; i++ {
		octx, cancel := context.WithTimeout(ctx, 20*time.Second)
		if i%10 == 5 {
			err = v.snap(octx, p)
			cancel()
			if err != nil {
				v.snapErr = err
				if !v.cutting.Load() {
					v.snapErrUp = err
				}
				return
			}
			continue
		}
		n := 1 + logUniformSize(r, 256<<10)
		obj := r.IntN(pcVolumeSize / pcVolumeObject)
		off := obj*pcVolumeObject + r.IntN(pcVolumeObject-n+1)
		data := payload(v.name, int(seed%1_000_000)*1_000_000+i, n)
		err = vol.WriteAt(octx, data, uint64(off))
		cancel()
		if err != nil {
			v.pending = &pcVolumeWrite{off, data}
			return
		}
		copy(v.data[off:], data)
		v.acks++
		v.writes++
	}
}

func (v *pcVolume) snap(ctx context.Context, p *client.Pool) error {
	v.nsnap++
	name := fmt.Sprint("s", v.nsnap)
	if _, err := volume.SnapCreate(ctx, p, v.name, name); err != nil {
		v.psnap, v.pdata = name, bytes.Clone(v.data)
		return err
	}
	v.snaps[name] = bytes.Clone(v.data)
	v.acks++
	v.snapsTaken++
	if old := fmt.Sprint("s", v.nsnap-2); v.snaps[old] != nil {
		delete(v.snaps, old) // gone or not after a failure: not checked again
		if err := volume.SnapRemove(ctx, p, v.name, old, nil); err != nil {
			return err
		}
	}
	return nil
}

// check reads the volume and its snapshots back after a cut.
func (v *pcVolume) check(t *testing.T, p *client.Pool, n *pcCounts) {
	n.checked += v.acks
	v.acks = 0
	if v.snapErrUp != nil {
		t.Errorf("volume %s: a snapshot failed while the cluster was up (before the cut): %v", v.name, v.snapErrUp)
	} else if v.snapErr != nil {
		t.Logf("volume %s: a snapshot failed as the power went: %v", v.name, v.snapErr)
	}
	v.snapErr, v.snapErrUp = nil, nil
	got := pcReadVolume(t, p, v.name, "")
	ok := bytes.Equal(got, v.data)
	if !ok && v.pending != nil {
		want := bytes.Clone(v.data)
		copy(want[v.pending.off:], v.pending.data)
		ok = bytes.Equal(got, want)
	}
	if !ok {
		n.torn++
		t.Errorf("volume %s: its content differs from every acknowledged state", v.name)
	}
	v.data, v.pending = got, nil
	for name, want := range v.snaps {
		if got := pcReadVolume(t, p, v.name, name); !bytes.Equal(got, want) {
			n.lost++
			t.Errorf("volume %s@%s: its content differs from the volume's when it was taken", v.name, name)
		}
	}
	if v.psnap != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		info, err := volume.Stat(ctx, p, v.name)
		cancel()
		if err == nil && hasSnap(info, v.psnap) {
			if got := pcReadVolume(t, p, v.name, v.psnap); !bytes.Equal(got, v.pdata) {
				n.torn++
				t.Errorf("volume %s@%s, created as the power went: its content differs from the volume's then", v.name, v.psnap)
			}
			v.snaps[v.psnap] = v.pdata
		}
		v.psnap, v.pdata = "", nil
	}
	v.snapAfterRestart(t, p)
}

// snapAfterRestart checks that the cluster back from a cut takes
// snapshots: the writer the cut stopped (this process closed the volume
// while etcd was down) no longer counts once etcd answers, and a snapshot
// succeeds.
func (v *pcVolume) snapAfterRestart(t *testing.T, p *client.Pool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := volume.Writers(ctx, p, v.name)
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("volume %s, closed: %d writer(s) still registered 5 s after the cluster was back (%v)", v.name, n, err)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	start := time.Now()
	if err := v.snap(ctx, p); err != nil {
		t.Errorf("volume %s: a snapshot once the cluster was back failed: %v", v.name, err)
		return
	}
	t.Logf("volume %s: a snapshot once the cluster was back took %v", v.name, time.Since(start).Round(time.Millisecond))
}

func hasSnap(info volume.Info, name string) bool {
	for _, s := range info.Snaps {
		if s.Name == name {
			return true
		}
	}
	return false
}

func pcReadVolume(t *testing.T, p *client.Pool, name, snap string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var vol *volume.Volume
	var err error
	if snap == "" {
		vol, err = volume.Open(ctx, p, name)
	} else {
		vol, err = volume.OpenSnap(ctx, p, name, snap)
	}
	if err != nil {
		t.Fatalf("open volume %s@%s after the cut: %v", name, snap, err)
	}
	defer vol.Close()
	b := make([]byte, pcVolumeSize)
	if err := vol.ReadAt(ctx, b, 0); err != nil {
		t.Fatalf("read volume %s@%s after the cut: %v", name, snap, err)
	}
	return b
}
