package cli

import (
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]uint64{"4096": 4096, "4K": 4096, "4KiB": 4096, "512m": 512 << 20, "100G": 100 << 30, "2T": 2 << 40,
		"1P": 1 << 50, "1E": 1 << 60, "8EiB": 1 << 63} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "1.5G", "10X", "99999999P"} {
		if _, err := parseBytes(in); err == nil || !strings.Contains(err.Error(), in) {
			t.Errorf("parseBytes(%q): want an error naming the input, got %v", in, err)
		}
	}
	for _, in := range []string{"9E", "16E", "99999999P", "99999999999999999999"} {
		if _, err := parseBytes(in); err == nil || !strings.Contains(err.Error(), "too large") || !strings.Contains(err.Error(), "8 EiB") {
			t.Errorf("parseBytes(%q): want an error saying it is too large and naming the maximum, got %v", in, err)
		}
	}
	if _, err := parseSize("2G"); err == nil || !strings.Contains(err.Error(), "1 GiB") {
		t.Errorf("an object size over 1 GiB: %v", err)
	}
}
