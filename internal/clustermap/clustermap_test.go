package clustermap

import (
	"encoding/json"
	"strings"
	"testing"
)

func sample() *Map {
	m := &Map{Epoch: 3, FSID: "x", NextPoolID: 2}
	m.UpsertHost("b", "r1")
	m.UpsertHost("a", "")
	m.UpsertOSD(OSD{ID: 1, Host: "b", Class: ClassSSD, Weight: 1, Up: true, In: true})
	m.UpsertOSD(OSD{ID: 0, Host: "a", Class: ClassHDD, Weight: 2, In: true})
	m.Pools = []Pool{{ID: 1, Name: "p", Size: 2, MinSize: 1, PGNum: 8, FailureDomain: DomainHost}}
	return m
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	m := sample()
	got, err := Decode(m.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Encode()) != string(m.Encode()) {
		t.Fatalf("round trip changed the map:\n%s\n%s", got.Encode(), m.Encode())
	}
	if m.Hosts[0].Name != "a" || m.OSDs[0].ID != 0 || m.NextOSDID != 2 {
		t.Fatalf("upserts must keep lists sorted and next id ahead: %+v", m)
	}
	if h, _ := m.Host("a"); h.Rack != DefaultRack {
		t.Fatalf("host without rack should be in %q, got %q", DefaultRack, h.Rack)
	}
}

func TestCloneIsDeep(t *testing.T) {
	m := sample()
	c := m.Clone()
	c.OSDs[0].Up = true
	c.Pools[0].Size = 3
	if m.OSDs[0].Up || m.Pools[0].Size != 2 {
		t.Fatal("changing a clone changed the original")
	}
}

func TestValidateRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		mut  func(*Map)
		want string
	}{
		"unknown host": {func(m *Map) { m.OSDs[0].Host = "zz" }, "unknown host"},
		"bad class":    {func(m *Map) { m.OSDs[0].Class = "tape" }, "unknown device class"},
		"neg weight":   {func(m *Map) { m.OSDs[0].Weight = -1 }, "bad weight"},
		"flash slash":  {func(m *Map) { m.OSDs[0].Flash = "a/b" }, "flash device name"},
		"flash long":   {func(m *Map) { m.OSDs[0].Flash = strings.Repeat("n", MaxFlashLen+1) }, "longer than 128"},
		"dup pool name": {func(m *Map) {
			m.Pools = append(m.Pools, Pool{ID: 5, Name: "p", Size: 1, MinSize: 1, PGNum: 1, FailureDomain: "osd"})
			m.NextPoolID = 6
		}, "two pools named"},
		"min_size":  {func(m *Map) { m.Pools[0].MinSize = 3 }, "min_size 3"},
		"pg_num":    {func(m *Map) { m.Pools[0].PGNum = 0 }, "pg_num 0"},
		"domain":    {func(m *Map) { m.Pools[0].FailureDomain = "planet" }, "unknown failure domain"},
		"pool id":   {func(m *Map) { m.NextPoolID = 1 }, "not below next_pool_id"},
		"osd order": {func(m *Map) { m.OSDs[0], m.OSDs[1] = m.OSDs[1], m.OSDs[0] }, "not sorted"},
	} {
		m := sample()
		tc.mut(m)
		err := m.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: want error containing %q, got %v", name, tc.want, err)
		}
	}
}

func TestPGIDString(t *testing.T) {
	for _, s := range []string{"1.0", "3.2a", "4294967295.ffffffff"} {
		id, err := ParsePGID(s)
		if err != nil || id.String() != s {
			t.Errorf("ParsePGID(%q) = %v, %v", s, id, err)
		}
	}
	for _, s := range []string{"", "1", "x.1", "1.zz"} {
		if _, err := ParsePGID(s); err == nil {
			t.Errorf("ParsePGID(%q) accepted", s)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(sample().Encode())
	f.Add([]byte(`{"epoch":1}`))
	f.Add([]byte(`{"osds":[{"id":-1}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		// Whatever decodes must be valid and stable.
		m2, err := Decode(m.Encode())
		if err != nil {
			t.Fatalf("re-decoding an accepted map failed: %v", err)
		}
		if string(m2.Encode()) != string(m.Encode()) {
			t.Fatal("encode/decode not stable")
		}
	})
}

func TestValidatePoolName(t *testing.T) {
	for _, name := range []string{"default", "vms", "rbd.ssd", "a", "_tmp", ".rgw.root", "pool-1", "x..y"} {
		if err := ValidatePoolName(name); err != nil {
			t.Errorf("ValidatePoolName(%q): %v", name, err)
		}
	}
	for _, name := range []string{"", ".", "..", "-x", "--force", "a/b", "a b", "a@b", strings.Repeat("a", MaxPoolNameLen+1)} {
		if err := ValidatePoolName(name); err == nil {
			t.Errorf("ValidatePoolName(%q) accepted it", name)
		}
		p := Pool{Name: name, Size: 1, MinSize: 1, PGNum: 1, FailureDomain: DomainOSD}
		if err := ValidatePool(&p); err == nil {
			t.Errorf("ValidatePool accepted a pool named %q", name)
		}
	}
}

func TestECPoolValidate(t *testing.T) {
	ec := func(k, m, unit int) *ECProfile { return &ECProfile{K: k, M: m, StripeUnit: unit} }
	for _, c := range []struct {
		pool Pool
		want string // "" accepted, else a part of the error
	}{
		{Pool{Size: 3, MinSize: 3, EC: ec(2, 1, 16384)}, ""},
		{Pool{Size: 6, MinSize: 4, EC: ec(4, 2, 4096)}, ""},
		{Pool{Size: 4, MinSize: 3, EC: ec(2, 1, 16384)}, "size 4 must be K+M = 3"},
		{Pool{Size: 3, MinSize: 1, EC: ec(2, 1, 16384)}, "min_size 1 is below K = 2"},
		{Pool{Size: 2, MinSize: 1, EC: ec(1, 1, 16384)}, "at least 2 data"},
		{Pool{Size: 3, MinSize: 3, EC: ec(2, 1, 1000)}, "stripe unit 1000"},
		{Pool{Size: 16, MinSize: 14, EC: ec(13, 4, 4096)}, "at most 16 chunks"},
	} {
		p := c.pool
		p.Name, p.PGNum, p.FailureDomain = "p", 8, DomainHost
		err := ValidatePool(&p)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v refused: %v", *p.EC, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: got %v, want an error with %q", *p.EC, err, c.want)
		}
	}
}

func TestParseECProfile(t *testing.T) {
	e, err := ParseECProfile("4+2", 0)
	if err != nil || e != (ECProfile{K: 4, M: 2, StripeUnit: ECDefaultUnit}) || e.String() != "4+2" {
		t.Fatalf("4+2: %+v %v", e, err)
	}
	for _, bad := range []string{"", "4", "4+", "+2", "a+b", "4-2", "1+1", "20+4"} {
		if _, err := ParseECProfile(bad, 0); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// A map written before erasure coding decodes with no profile, and one
// with a profile round-trips it.
func TestECProfileJSON(t *testing.T) {
	var p Pool
	if err := json.Unmarshal([]byte(`{"id":1,"name":"a","size":3,"min_size":2,"pg_num":8,"failure_domain":"host"}`), &p); err != nil || p.Erasure() {
		t.Fatalf("old pool: %+v %v", p, err)
	}
	p = Pool{Name: "e", Size: 3, MinSize: 3, EC: &ECProfile{K: 2, M: 1, StripeUnit: 16384}}
	raw, _ := json.Marshal(p)
	var back Pool
	if err := json.Unmarshal(raw, &back); err != nil || back.EC == nil || *back.EC != *p.EC {
		t.Fatalf("round trip of %s: %+v %v", raw, back, err)
	}
}
