package e2e

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cairn-storage/cairn/client"
)

// checkECPools checks what an erasure-coded pool is today: `pool create
// --ec` refuses unless the experimental switch is set (the OSDs do not
// serve such a pool yet); with it, bad profiles are refused with the
// reason, a good one lands in the map with K+M shards and min_size K+1,
// pool ls says what it is, and an OSD refuses its requests by name rather
// than store it as something else.
func checkECPools(t *testing.T, c *cluster) {
	if _, err := c.cli(nil, "pool", "create", "ecp", "--ec", "2+1"); err == nil || !strings.Contains(err.Error(), "not served by this version's OSDs yet") {
		t.Fatalf("pool create --ec without %s: %v", client.ExperimentalECEnv, err)
	}
	t.Setenv(client.ExperimentalECEnv, "1")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ec", "4"}, "write it as K+M"},
		{[]string{"--ec", "1+1"}, "at least 2 data"},
		{[]string{"--ec", "2+2"}, "wants 4 shards in distinct hosts, but the cluster has only 3 host(s)"},
		{[]string{"--ec", "2+1", "--stripe-unit", "1000"}, "stripe unit 1000"},
		{[]string{"--ec", "2+1", "--size", "4"}, "contradicts erasure code 2+1"},
		{[]string{"--ec", "2+1", "--min-size", "1"}, "min_size 1 is below K = 2"},
	} {
		args := append([]string{"pool", "create", "ecbad"}, tc.args...)
		if _, err := c.cli(nil, args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cairn %s: want an error containing %q, got %v", strings.Join(args, " "), tc.want, err)
		}
	}
	out, err := c.cli(nil, "pool", "create", "ecp", "--ec", "2+1", "--pg-num", "8")
	if err != nil || !strings.Contains(string(out), "erasure code 2+1, one shard per host, any 2 rebuild an object, writes need 3: can lose 1 host") {
		t.Fatalf("pool create --ec 2+1: %v\n%s", err, out)
	}
	out, err = c.cli(nil, "--json", "pool", "ls")
	var pools []client.PoolInfo
	if err == nil {
		err = json.Unmarshal(out, &pools)
	}
	if err != nil {
		t.Fatalf("pool ls: %v\n%s", err, out)
	}
	found := false
	for _, p := range pools {
		if p.Name == "ecp" {
			found = p.EC == "2+1" && p.Size == 3 && p.MinSize == 3 && p.StripeUnit == 16<<10
			if !found {
				t.Fatalf("pool ls shows %+v", p)
			}
		}
	}
	if !found {
		t.Fatalf("pool ls does not list ecp: %s", out)
	}
	if _, err := c.cli([]byte("x"), "obj", "put", "ecp", "o", "-"); err == nil || !strings.Contains(err.Error(), "does not serve erasure-coded pools yet") {
		t.Fatalf("a write to an erasure-coded pool: %v", err)
	}
	if out, err := c.cli(nil, "status"); err != nil || !strings.Contains(string(out), "do not serve erasure-coded pools yet") || strings.Contains(string(out), "not yet reported") {
		t.Fatalf("status with an erasure-coded pool: %v\n%s", err, out)
	}
	if _, err := c.cli(nil, "pool", "rm", "ecp", "--yes-i-really-mean-it"); err == nil || !strings.Contains(err.Error(), "add --force") {
		t.Fatalf("pool rm of a pool whose volumes cannot be listed: %v", err)
	}
	if out, err := c.cli(nil, "pool", "rm", "ecp", "--yes-i-really-mean-it", "--force"); err != nil {
		t.Fatalf("pool rm ecp --force: %v\n%s", err, out)
	}
}
