package cli

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cairn-storage/cairn/internal/devcluster"
)

// The data cache flags of cairn dev reach its OSDs as flags cairn osd
// understands, with the values given; unset, the OSDs keep their defaults.
func TestDevPassesCacheFlags(t *testing.T) {
	for _, tc := range []struct {
		devArgs []string
		want    []string
	}{
		{nil, nil},
		{[]string{"--data-cache-size", "33554432"}, []string{"--data-cache-size", "33554432"}},
		{[]string{"--data-cache-reserve=false", "--data-cache-size=-1"}, []string{"--data-cache-size", "-1", "--data-cache-reserve=false"}},
	} {
		dev := devCmd(&globals{})
		if err := dev.ParseFlags(tc.devArgs); err != nil {
			t.Fatalf("cairn dev %v: %v", tc.devArgs, err)
		}
		var o devcluster.Options
		o.DataCacheSize, _ = dev.Flags().GetInt64("data-cache-size")
		o.DataCacheReserve, _ = dev.Flags().GetBool("data-cache-reserve")
		got := o.OSDCacheArgs()
		if !slices.Equal(got, tc.want) {
			t.Errorf("cairn dev %v gives its OSDs %q, want %q", tc.devArgs, got, tc.want)
		}
		osd := osdCmd(&globals{})
		if err := osd.ParseFlags(got); err != nil {
			t.Fatalf("cairn osd refuses what cairn dev %v gives it: %v", tc.devArgs, err)
		}
		size, _ := osd.Flags().GetInt64("data-cache-size")
		reserve, _ := osd.Flags().GetBool("data-cache-reserve")
		if size != o.DataCacheSize || reserve != o.DataCacheReserve {
			t.Errorf("cairn dev %v: the OSD got size %s reserve %v", tc.devArgs, strconv.FormatInt(size, 10), reserve)
		}
	}
}

// --writeback-size of cairn dev reaches each OSD as cairn osd's flag, and
// cairn osd parses it into the store's area size; 0 and unset mean none,
// and a bad size is refused with the flag's name.
func TestDevPassesWritebackSize(t *testing.T) {
	for _, tc := range []struct {
		dev  string
		args []string
		want int64
	}{
		{"", nil, 0},
		{"0", nil, 0},
		{"64M", []string{"--writeback-size", "64M"}, 64 << 20},
		{"8G", []string{"--writeback-size", "8G"}, 8 << 30},
	} {
		dev := devCmd(&globals{})
		if err := dev.ParseFlags([]string{"--writeback-size=" + tc.dev}); err != nil {
			t.Fatal(err)
		}
		o := devcluster.Options{DataCacheReserve: true}
		o.WritebackSize, _ = dev.Flags().GetString("writeback-size")
		got := o.OSDCacheArgs()
		if !slices.Equal(got, tc.args) {
			t.Errorf("cairn dev --writeback-size=%q gives its OSDs %q, want %q", tc.dev, got, tc.args)
		}
		osd := osdCmd(&globals{})
		if err := osd.ParseFlags(got); err != nil {
			t.Fatal(err)
		}
		s, _ := osd.Flags().GetString("writeback-size")
		if n, err := parseAreaSize("--writeback-size", s); err != nil || n != tc.want {
			t.Errorf("cairn osd --writeback-size %q: %d, %v; want %d", s, n, err, tc.want)
		}
	}
	if _, err := parseAreaSize("--writeback-size", "lots"); err == nil {
		t.Error("--writeback-size lots was taken")
	}
}

// --flash-cache-size of cairn dev reaches each OSD as cairn osd's flag,
// which parses it into the store's cache size.
func TestDevPassesFlashCacheSize(t *testing.T) {
	dev := devCmd(&globals{})
	if err := dev.ParseFlags([]string{"--flash-cache-size=2G"}); err != nil {
		t.Fatal(err)
	}
	o := devcluster.Options{DataCacheReserve: true}
	o.FlashCacheSize, _ = dev.Flags().GetString("flash-cache-size")
	args := o.OSDCacheArgs()
	if !slices.Equal(args, []string{"--flash-cache-size", "2G"}) {
		t.Fatalf("cairn dev --flash-cache-size=2G gives its OSDs %q", args)
	}
	osd := osdCmd(&globals{})
	if err := osd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	s, _ := osd.Flags().GetString("flash-cache-size")
	if n, err := parseAreaSize("--flash-cache-size", s); err != nil || n != 2<<30 {
		t.Fatalf("cairn osd --flash-cache-size %q: %d, %v", s, n, err)
	}
	if _, err := parseAreaSize("--flash-cache-size", "big"); err == nil || !strings.Contains(err.Error(), "--flash-cache-size") {
		t.Fatalf("a bad size: %v, want an error naming the flag", err)
	}
}
