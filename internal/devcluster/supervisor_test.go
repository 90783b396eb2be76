package devcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A process that keeps exiting waits longer each time, up to 30 s; one that
// ran for a while starts over at a second.
func TestDevRestartBackoff(t *testing.T) {
	var got []time.Duration
	b := time.Duration(0)
	for range 8 {
		b = nextBackoff(b, time.Second)
		got = append(got, b)
	}
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30, 30}
	for i := range want {
		want[i] *= time.Second
	}
	if !slices.Equal(got, want) {
		t.Errorf("backoffs of a process exiting after 1 s each time: %v, want %v", got, want)
	}
	if b := nextBackoff(30*time.Second, 2*time.Minute); b != time.Second {
		t.Errorf("a process that ran 2 min waits %s before its restart, want 1s", b)
	}
}

// devInfo reads dir/dev.json.
func devInfo(t *testing.T, dir string) Info {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "dev.json"))
	if err != nil {
		t.Fatal(err)
	}
	var info Info
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	return info
}

// alive reports whether pid runs (and is not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// waitPID waits until dev.json shows a running process name whose pid is
// not old, and returns it.
func waitPID(t *testing.T, dir, name string, old int, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, p := range devInfo(t, dir).Processes {
			if p.Name == name && p.PID != old && alive(p.PID) {
				return p.PID
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s (pid %d) not replaced by a running process in dev.json within %s: %+v", name, old, within, devInfo(t, dir))
	return 0
}

// The supervisor of cairn dev, with sleeping shells as its processes:
// a killed one is started again and dev.json follows; `cairn dev restart`
// replaces a running one through the control socket; with --restart=false
// a killed one stays down until asked; stop leaves none running.
func TestDevSupervisorRestarts(t *testing.T) {
	for _, auto := range []bool{true, false} {
		t.Run(fmt.Sprintf("restart=%v", auto), func(t *testing.T) {
			dir := t.TempDir()
			s := newSupervisor("/bin/sh", dir, filepath.Join(dir, "cairn.conf"), nil, auto, log.Printf)
			closeSocket, err := s.serve()
			if err != nil {
				t.Fatal(err)
			}
			defer closeSocket()
			defer s.stop()
			for _, name := range []string{"mon.a", "osd.0", "osd.1"} {
				if err := s.start(name, "", "", []string{"-c", "sleep 600"}); err != nil {
					t.Fatal(err)
				}
			}
			first := devInfo(t, dir).Processes
			if err := syscall.Kill(first[1].PID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if auto {
				waitPID(t, dir, "osd.0", first[1].PID, 5*time.Second)
			} else {
				time.Sleep(1500 * time.Millisecond) // past the first backoff
				if p := devInfo(t, dir).Processes[1]; p.PID != first[1].PID || alive(p.PID) {
					t.Fatalf("with --restart=false, the killed osd.0 was restarted: %+v", p)
				}
			}
			for _, name := range []string{"osd.0", "1"} {
				res, err := RequestRestart(context.Background(), dir, name)
				if err != nil {
					t.Fatalf("cairn dev restart %s: %v", name, err)
				}
				if !alive(res.PID) || alive(res.OldPID) {
					t.Fatalf("cairn dev restart %s: new pid %d alive %v, old pid %d alive %v", name, res.PID, alive(res.PID), res.OldPID, alive(res.OldPID))
				}
			}
			if _, err := RequestRestart(context.Background(), dir, "osd.7"); err == nil || !strings.Contains(err.Error(), "mon.a, osd.0, osd.1") {
				t.Errorf("restart of an unknown process: want an error listing the known ones, got %v", err)
			}
			last := devInfo(t, dir).Processes
			if last[0].PID != first[0].PID || last[1].PID == first[1].PID || last[2].PID == first[2].PID {
				t.Errorf("dev.json after restarts of osd.0 and osd.1: %+v, first %+v", last, first)
			}
			if auto { // an OSD removed from the map is left down
				s.setRemoved(func(name string) string {
					if name == "osd.1" {
						return "removed"
					}
					return ""
				})
				syscall.Kill(last[2].PID, syscall.SIGKILL)
				time.Sleep(1500 * time.Millisecond)
				if p := devInfo(t, dir).Processes[2]; p.PID != last[2].PID {
					t.Errorf("osd.1, removed from the map, was restarted: %+v", p)
				}
			}
			s.stop()
			for _, p := range last {
				if alive(p.PID) {
					t.Errorf("%s (pid %d) still runs after stop", p.Name, p.PID)
				}
			}
		})
	}
}

// No cairn dev on a directory: restart says so and names the directory.
func TestDevRestartWithoutCluster(t *testing.T) {
	dir := t.TempDir()
	_, err := RequestRestart(context.Background(), dir, "osd.0")
	if err == nil || !strings.Contains(err.Error(), "--dir "+dir) {
		t.Errorf("want an error naming --dir %s, got %v", dir, err)
	}
}
