package bufpool

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

func isAligned(b []byte) bool { return uintptr(unsafe.Pointer(&b[0]))%Align == 0 }

func TestGetSizesAndAlignment(t *testing.T) {
	for _, n := range []int{1, 4095, MinSize - 1, MinSize, MinSize + 1, 1 << 20, 3<<20 + 17, MaxSize, MaxSize + 1} {
		b := Get(n)
		if len(b) != n {
			t.Fatalf("Get(%d): len %d", n, len(b))
		}
		if n >= MinSize && !isAligned(b) {
			t.Fatalf("Get(%d): first byte not %d-aligned", n, Align)
		}
		if n < MinSize && cap(b) != n {
			t.Fatalf("Get(%d): cap %d, want exactly %d for a small buffer", n, cap(b), n)
		}
		if a := Aligned(n); len(a) != n || !isAligned(a) {
			t.Fatalf("Aligned(%d): len %d, aligned %v", n, len(a), isAligned(a))
		}
		if at := uintptr(unsafe.Pointer(&b[0])); n >= HugePage && at%HugePage != 0 {
			t.Fatalf("Get(%d) at %#x: not on a huge-page boundary", n, at)
		}
		if c := class(n); c >= 0 && cap(b) != MinSize<<c {
			t.Fatalf("Get(%d): cap %d, want class size %d", n, cap(b), MinSize<<c)
		}
		b[n-1] = 1 // the whole length is usable
		Put(b)
	}
}

func TestClassBoundaries(t *testing.T) {
	for n, want := range map[int]int{MinSize - 1: -1, MinSize: 0, MinSize + 1: 1, 2 * MinSize: 1, MaxSize: maxShift - minShift, MaxSize + 1: -1} {
		if got := class(n); got != want {
			t.Errorf("class(%d) = %d, want %d", n, got, want)
		}
	}
}

// A buffer handed back is handed out again (the point of the pool), and
// slices that are not whole buffers from Get are never taken in.
func TestPutReusesOnlyWholeBuffers(t *testing.T) {
	poison = true
	defer func() { poison = false }()
	reused := false
	for range 100 { // sync.Pool may drop a buffer; it rarely drops them all
		b := Get(1 << 20)
		b[0] = 7
		Put(b)
		if c := Get(1 << 20); &c[0] == &b[0] {
			reused = true
			if c[0] != 0xdb || c[len(c)-1] != 0xdb || c[len(c)/3] != 0xdb {
				t.Fatalf("poisoned buffer holds %#x, %#x, %#x", c[0], c[len(c)/3], c[len(c)-1])
			}
			break
		}
	}
	if !reused {
		t.Fatal("a buffer handed back was never handed out again")
	}

	whole := Get(1 << 20)
	Put(whole[4096:]) // a sub-slice: ignored
	for range 100 {
		c := Get(1 << 20)
		if &c[0] == &whole[4096] {
			t.Fatal("a sub-slice was taken into the pool")
		}
		// Leave c out so the next Get would find anything wrongly put.
	}
}

// TestLargeBuffersGetHugePages: where the kernel offers transparent huge
// pages, a large buffer's mapping is marked for them (VmFlags "hg"). Whether
// the kernel then finds free 2 MiB pages, or the heap had touched that memory
// before with small pages, is the machine's state, so it is only logged.
func TestLargeBuffersGetHugePages(t *testing.T) {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || strings.Contains(string(mode), "[never]") {
		t.Skipf("no transparent huge pages here (%q, %v)", mode, err)
	}
	b := Aligned(8 << 20)
	for i := range b {
		b[i] = byte(i)
	}
	huge, flags, found := mappingOf(t, uintptr(unsafe.Pointer(&b[0])))
	if !found {
		t.Fatal("the buffer's mapping is not in /proc/self/smaps")
	}
	if !slices.Contains(flags, "hg") {
		t.Fatalf("an 8 MiB buffer's mapping is not marked for huge pages (VmFlags %v)", flags)
	}
	t.Logf("%d KiB of huge pages back the mapping", huge)
}

// mappingOf reads /proc/self/smaps for the mapping holding address at: its
// AnonHugePages in KiB and its VmFlags.
func mappingOf(t *testing.T, at uintptr) (hugeKiB int, flags []string, found bool) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(fields[0], "-"); ok && !strings.HasSuffix(fields[0], ":") {
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 == nil && err2 == nil {
				in = uint64(l) <= uint64(at) && uint64(at) < h
				continue
			}
		}
		switch {
		case in && fields[0] == "AnonHugePages:":
			hugeKiB, _ = strconv.Atoi(fields[1])
		case in && fields[0] == "VmFlags:":
			return hugeKiB, fields[1:], true
		}
	}
	return 0, nil, false
}
