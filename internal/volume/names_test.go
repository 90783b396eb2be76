package volume

import "testing"

func TestParseRef(t *testing.T) {
	for in, want := range map[string]Ref{
		"default/vm1":         {Pool: "default", Name: "vm1"},
		"default/vm1@monday":  {Pool: "default", Name: "vm1", Snap: "monday"},
		"p.1/a_b-c.d@s.1-x_y": {Pool: "p.1", Name: "a_b-c.d", Snap: "s.1-x_y"},
	} {
		got, err := ParseRef(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("ParseRef(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "default", "default/", "/vm1", "default/vm1@", "default/a/b",
		"default/vm1@a@b", "default/@snap", "default/.hidden", "default/vm1@-x", "default/vm 1"} {
		if r, err := ParseRef(in); err == nil {
			t.Errorf("ParseRef(%q) = %+v; want an error", in, r)
		}
	}
}

// FuzzParseRef: whatever ParseRef accepts prints back as its input.
func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"default/vm1", "default/vm1@snap", "default/vm1@", "a/b/c", "@", "/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRef(s)
		if err != nil {
			return
		}
		if r.String() != s {
			t.Fatalf("ParseRef(%q) = %+v, which prints as %q", s, r, r.String())
		}
		if r.Pool == "" || r.Name == "" {
			t.Fatalf("ParseRef(%q) = %+v: an empty part", s, r)
		}
	})
}

func TestReservedObject(t *testing.T) {
	for _, name := range []string{"volumes", "volume.vm1", "vol.0123456789abcdef.0000000000000001"} {
		if what, ok := ReservedObject(name); !ok || what == "" {
			t.Errorf("ReservedObject(%q) = %q, %v; want reserved", name, what, ok)
		}
	}
	for _, name := range []string{"volumes.txt", "volume.", "vol.1.2", "my-volume.vm1", "vol.0123456789abcdef.1", "bench_obj_1"} {
		if _, ok := ReservedObject(name); ok {
			t.Errorf("ReservedObject(%q): an ordinary name is reserved", name)
		}
	}
	i := Info{ID: "0123456789abcdef"}
	if name := i.objectName(7); !dataObjectName.MatchString(name) {
		t.Errorf("the data object name %q is not reserved", name)
	}
}
