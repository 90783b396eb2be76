package devcluster

import (
	"context"
	"net"
	"testing"
	"time"
)

// A start that fails once processes run (here: etcd never answers) stops
// what it started and returns the error; it used to stop a nil cluster
// and panic, leaving `cairn dev` to die with a stack trace.
func TestFailedStartStopsAndReturnsTheError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := Start(ctx, Options{Dir: t.TempDir(), Hosts: 1, OSDsPerHost: 1, OSDPort: port,
		LeaseTTL: time.Second, External: []string{"http://127.0.0.1:1"}, Self: "/bin/true"})
	if err == nil || c != nil {
		t.Fatalf("Start with an etcd that never answers: %v, %v; want an error", c, err)
	}
}
