package main

import (
	"strings"
	"testing"
)

// TestFrontPids: the processes the clients talk to must be among those
// whose CPU is counted, or their share would be of nothing.
func TestFrontPids(t *testing.T) {
	base := []string{"-creds", "s3.json", "-op", "put", "-pids", "10,11,12"}
	o, err := parseFlags(append(base, "-front-pids", "11"))
	if err != nil {
		t.Fatal(err)
	}
	if len(o.frontPids) != 1 || o.frontPids[0] != 11 {
		t.Fatalf("front pids %v, want [11]", o.frontPids)
	}
	_, err = parseFlags(append(base, "-front-pids", "13"))
	if err == nil || !strings.Contains(err.Error(), "13 is not one of -pids") {
		t.Fatalf("a front pid outside -pids: %v, want it named", err)
	}
}
