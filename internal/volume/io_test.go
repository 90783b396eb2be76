package volume

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
)

// While the snapshot-group registration is lost, writers wait for it to
// return and then carry the number it brings back; past pausedWait, or when
// their context ends, they fail.
func TestWritersWaitForTheSnapGroup(t *testing.T) {
	var logged []string
	v := &Volume{p: &client.Pool{}, Info: Info{Pool: "p", Name: "v"}}
	WithLog(func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) })(v)
	v.setSnapSeq(3, true)
	at3 := v.wp
	v.setSnapSeq(0, false)
	if len(logged) != 1 || !strings.Contains(logged[0], "volume p/v: lost its snapshot-group registration") {
		t.Fatalf("losing the registration logged %q", logged)
	}
	got := make(chan *client.Pool, 1)
	go func() {
		wp, done, err := v.writer(context.Background())
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		done()
		got <- wp
	}()
	select {
	case <-got:
		t.Fatal("a write went ahead without a registration")
	case <-time.After(50 * time.Millisecond):
	}
	v.setSnapSeq(4, true)
	if wp := <-got; wp == nil || wp == at3 || wp != v.wp {
		t.Fatal("the writer did not get the pool at the number the registration brought back")
	}
	if len(logged) != 2 || !strings.Contains(logged[1], "volume p/v: snapshot-group registration back after") {
		t.Fatalf("the registration's return logged %q", logged)
	}

	v.setSnapSeq(0, false)
	old := pausedWait
	pausedWait = 20 * time.Millisecond
	defer func() { pausedWait = old }()
	if _, _, err := v.writer(context.Background()); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("after pausedWait: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	pausedWait = time.Minute
	if _, _, err := v.writer(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("with its context cancelled: %v", err)
	}
}

// Object names are on disk in every pool that holds volumes: the formatting
// by hand must give exactly the names volumes always had.
func TestObjectNamesKeepTheirFormat(t *testing.T) {
	for _, id := range []string{"", "a1b2c3", "0123456789abcdef0123"} {
		in := &Info{ID: id}
		for _, index := range []uint64{0, 1, 0xf, 0x10, 0xabcdef, 1 << 40, math.MaxUint64} {
			if got, want := in.objectName(index), fmt.Sprintf("vol.%s.%016x", id, index); got != want {
				t.Fatalf("object %d of volume %q is named %q, want %q", index, id, got, want)
			}
		}
	}
}
