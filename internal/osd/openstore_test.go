package osd

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cairn-storage/cairn/internal/objstore"
)

// An OSD restarted while its predecessor still holds the store's lock
// waits for the lock instead of failing; a lock that stays held fails once
// the wait is over, saying what holds it.
func TestOpenStoreWaitsForLock(t *testing.T) {
	dir := t.TempDir()
	o := objstore.Options{Dir: dir, ReserveBytes: -1, DataCacheBytes: -1}
	st, err := objstore.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// The index's lock is a POSIX record lock; an open file description
	// lock on the same file conflicts with it as another process's would.
	f, err := os.OpenFile(filepath.Join(dir, "meta", "LOCK"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lock := func(typ int16) error {
		return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &unix.Flock_t{Type: typ, Whence: io.SeekStart})
	}
	if err := lock(unix.F_WRLCK); err != nil {
		t.Fatal(err)
	}
	if _, err := openStore(context.Background(), o, 100*time.Millisecond, func() {}); err == nil {
		t.Fatal("opened a store whose lock is held")
	} else if !strings.Contains(err.Error(), "locked by another process") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("the error for a held lock should say the store in %s is locked: %v", dir, err)
	}
	waited := make(chan struct{}, 1)
	go func() {
		<-waited
		time.Sleep(200 * time.Millisecond)
		if err := lock(unix.F_UNLCK); err != nil {
			t.Error(err)
		}
	}()
	st, err = openStore(context.Background(), o, 30*time.Second, func() { waited <- struct{}{} })
	if err != nil {
		t.Fatalf("store not opened once the lock was released: %v", err)
	}
	st.Close()
}

// An OSD's listen waits while its port is in use (a predecessor's
// connections), and fails with EADDRINUSE when it stays in use.
func TestListenWaitsForPort(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := held.Addr().String()
	if _, err := listen(context.Background(), addr, 100*time.Millisecond, func() {}); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("listen on a held port: %v, want EADDRINUSE after the wait", err)
	}
	waited := make(chan struct{}, 1)
	go func() {
		<-waited
		held.Close()
	}()
	ln, err := listen(context.Background(), addr, 30*time.Second, func() { waited <- struct{}{} })
	if err != nil {
		t.Fatalf("listen once the port is free: %v", err)
	}
	ln.Close()
}
