package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/client"
)

// Guarded omap transactions (client.Pool.OmapApply) and delimiter listings
// (OmapListDelim): what the S3 gateway keeps its bucket indexes with.

// TestOmapTxnGuards checks each guard and mutation of OmapApply.
func TestOmapTxnGuards(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{})
	ctx := context.Background()
	p := c.pool("default")
	get := func(name string, keys ...string) map[string][]byte {
		t.Helper()
		m, err := p.OmapGet(ctx, name, keys...)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	precondition := func(err error, key string, exists bool, value string) {
		t.Helper()
		var pe *client.PreconditionError
		if !errors.Is(err, client.ErrPrecondition) || !errors.As(err, &pe) {
			t.Fatalf("want a precondition failure on %q, got %v", key, err)
		}
		if pe.Key != key || pe.Exists != exists || exists && string(pe.Value) != value {
			t.Fatalf("precondition failure: got key %q exists %v value %q, want %q %v %q", pe.Key, pe.Exists, pe.Value, key, exists, value)
		}
	}

	// A missing object: ErrNotFound unless Create.
	err := p.OmapApply(ctx, "idx", client.OmapTxn{If: []client.OmapCond{{Key: "a", Absent: true}}, Set: map[string][]byte{"a": []byte("1")}})
	if !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("transaction on a missing object without Create: %v", err)
	}
	// Its omap is empty for the guards: a value guard fails as absent.
	err = p.OmapApply(ctx, "idx", client.OmapTxn{Create: true, If: []client.OmapCond{{Key: "a", Value: []byte("x")}}, Set: map[string][]byte{"a": []byte("1")}})
	precondition(err, "a", false, "")
	if _, err := p.Stat(ctx, "idx"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("a failed transaction created the object: %v", err)
	}
	if err := p.OmapApply(ctx, "idx", client.OmapTxn{Create: true, If: []client.OmapCond{{Key: "a", Absent: true}},
		Set: map[string][]byte{"a": []byte("1"), "b": []byte("2"), "c": nil, "\x00meta": []byte("m")}}); err != nil {
		t.Fatalf("create with an absent guard: %v", err)
	}
	if m := get("idx", "a", "b", "c", "\x00meta"); len(m) != 4 || string(m["a"]) != "1" || len(m["c"]) != 0 {
		t.Fatalf("after create: %q", m)
	}

	// Each kind of guard failing, the first failing one reported, and
	// nothing of the transaction applied.
	fail := client.OmapTxn{Set: map[string][]byte{"new": []byte("x")}, Rm: []string{"b"}, RmFrom: "a", RmTo: "z"}
	for _, tc := range []struct {
		conds  []client.OmapCond
		key    string
		exists bool
		value  string
		desc   string
	}{
		{[]client.OmapCond{{Key: "a", Absent: true}}, "a", true, "1", "absent guard on a present key"},
		{[]client.OmapCond{{Key: "a", Value: []byte("2")}}, "a", true, "1", "value guard on another value"},
		{[]client.OmapCond{{Key: "zz", Value: []byte("2")}}, "zz", false, "", "value guard on an absent key"},
		{[]client.OmapCond{{Key: "c", Value: []byte("x")}}, "c", true, "", "value guard on an empty value"},
		{[]client.OmapCond{{Key: "a", Value: []byte("1")}, {Key: "zz", Absent: true}, {Key: "b", Value: []byte("3")}, {Key: "a", Absent: true}}, "b", true, "2", "the first failing of several"},
	} {
		txn := fail
		txn.If = tc.conds
		err := p.OmapApply(ctx, "idx", txn)
		precondition(err, tc.key, tc.exists, tc.value)
		if m := get("idx", "a", "b", "new"); len(m) != 2 || string(m["b"]) != "2" {
			t.Fatalf("%s: the failed transaction changed the omap: %q", tc.desc, m)
		}
	}

	// Guards that hold: removes (range, then keys), then sets, at once.
	if err := p.OmapApply(ctx, "idx", client.OmapTxn{
		If:     []client.OmapCond{{Key: "a", Value: []byte("1")}, {Key: "c", Value: nil}, {Key: "zz", Absent: true}},
		RmFrom: "b", RmTo: "d", Rm: []string{"a", "a"}, Set: map[string][]byte{"b2": []byte("set in the removed range"), "a": []byte("again")},
	}); err != nil {
		t.Fatal(err)
	}
	all, _, err := p.OmapList(ctx, "idx", "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, kv := range all {
		got = append(got, kv.Key+"="+string(kv.Value))
	}
	if want := []string{"\x00meta=m", "a=again", "b2=set in the removed range"}; !slices.Equal(got, want) {
		t.Fatalf("after the transaction: %q, want %q", got, want)
	}
	// A guard-only transaction changes nothing and succeeds.
	if err := p.OmapApply(ctx, "idx", client.OmapTxn{If: []client.OmapCond{{Key: "a", Value: []byte("again")}}}); err != nil {
		t.Fatal(err)
	}
	// Bad requests: a reversed range, a key too long.
	if err := p.OmapApply(ctx, "idx", client.OmapTxn{RmFrom: "b", RmTo: "a"}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("reversed range: %v", err)
	}
	if err := p.OmapApply(ctx, "idx", client.OmapTxn{Set: map[string][]byte{strings.Repeat("k", 4097): nil}}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("key of 4097 bytes: %v", err)
	}
	// The OSD's own bookkeeping (the transaction tokens) is not an xattr
	// a client sees.
	if x, err := p.Xattrs(ctx, "idx"); err != nil || len(x) != 0 {
		t.Fatalf("xattrs: %q %v", x, err)
	}
}

// TestOmapTxnConcurrentCounter: 16 clients increment one counter 100 times
// each by read-modify-write through OmapApply, retrying when the guard
// fails: no increment is lost and none counts twice.
func TestOmapTxnConcurrentCounter(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{})
	ctx := context.Background()
	const workers, incs = 16, 100
	p0 := c.pool("default")
	if err := p0.OmapApply(ctx, "counter", client.OmapTxn{Create: true, Set: map[string][]byte{"n": []byte("0")}}); err != nil {
		t.Fatal(err)
	}
	var conflicts atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for w := 0; w < workers; w++ {
		p := p0
		if w%2 == 1 {
			p = c.pool("default") // half the workers on clients of their own
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < incs; i++ {
				m, err := p.OmapGet(ctx, "counter", "n")
				if err != nil {
					errs <- err
					return
				}
				for {
					cur := m["n"]
					n, _ := strconv.Atoi(string(cur))
					err := p.OmapApply(ctx, "counter", client.OmapTxn{
						If:  []client.OmapCond{{Key: "n", Value: cur}},
						Set: map[string][]byte{"n": []byte(strconv.Itoa(n + 1))},
					})
					var pe *client.PreconditionError
					if errors.As(err, &pe) {
						conflicts.Add(1)
						m = map[string][]byte{"n": pe.Value} // the value it found: no read needed
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	m, err := p0.OmapGet(ctx, "counter", "n")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(m["n"]); got != strconv.Itoa(workers*incs) {
		t.Fatalf("counter is %s after %d×%d increments", got, workers, incs)
	}
	t.Logf("%d×%d increments: counter exact (%d) in %.1f s, %d guard failures retried",
		workers, incs, workers*incs, time.Since(start).Seconds(), conflicts.Load())
}

// TestOmapTxnKillOSD runs chains of guarded transactions while the primary
// of their objects is SIGKILLed and later restarted. Each transaction of
// writer w adds two keys for its step s and moves w's "last" from s-1 to s
// (guarded), so after recovery every acknowledged step must be there, every
// step up to "last" must be whole (both keys), and no key of a step past
// "last" may exist (a half-applied transaction). A writer whose
// transaction's outcome is unknown re-reads "last" and goes on from there.
func TestOmapTxnKillOSD(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{})
	ctx := context.Background()
	p := c.pool("default")
	const objects, perObject = 4, 4
	obj := func(i int) string { return fmt.Sprintf("bucket-index-%d", i) }
	for i := 0; i < objects; i++ {
		if err := p.OmapApply(ctx, obj(i), client.OmapTxn{Create: true}); err != nil {
			t.Fatal(err)
		}
	}
	victim := fmt.Sprintf("osd.%d", actingOf(t, c, "default", obj(0))[0])
	type writer struct {
		obj       string
		acked     int // highest step acknowledged
		unknown   int // transactions whose outcome was unknown
		ownFailed int // precondition failures on the writer's own change (must be 0)
	}
	writers := make([]*writer, objects*perObject)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ackedAfterKill atomic.Int64
	var killed atomic.Bool
	for i := range writers {
		w := &writer{obj: obj(i / perObject)}
		writers[i] = w
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			last := fmt.Sprintf("w%02d/last", id)
			prev := 0
			for s := 1; ; s++ {
				select {
				case <-stop:
					return
				default:
				}
				txn := client.OmapTxn{
					If: []client.OmapCond{{Key: last, Value: []byte(strconv.Itoa(prev))}},
					Set: map[string][]byte{
						last:                               []byte(strconv.Itoa(s)),
						fmt.Sprintf("w%02d/%06d/a", id, s): []byte(fmt.Sprint(s)),
						fmt.Sprintf("w%02d/%06d/b", id, s): bytes.Repeat([]byte{byte(s)}, 100+s%900),
					},
				}
				if prev == 0 {
					txn.If[0] = client.OmapCond{Key: last, Absent: true}
				}
				tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				err := p.OmapApply(tctx, w.obj, txn)
				cancel()
				var pe *client.PreconditionError
				switch {
				case err == nil:
					w.acked, prev = s, s
					if killed.Load() {
						ackedAfterKill.Add(1)
					}
					continue
				case errors.As(err, &pe):
					if string(pe.Value) == strconv.Itoa(s) {
						w.ownFailed++
					}
				default:
					w.unknown++
					t.Logf("writer %d step %d: %v", id, s, err)
				}
				// Find where the chain stands and go on from there.
				for {
					m, err := p.OmapGet(ctx, w.obj, last)
					if err == nil {
						prev, _ = strconv.Atoi(string(m[last]))
						s = prev
						break
					}
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
					}
				}
			}
		}(i)
	}
	time.Sleep(2 * time.Second)
	c.kill(victim)
	killed.Store(true)
	t.Logf("killed %s, the primary of %s", victim, obj(0))
	time.Sleep(6 * time.Second)
	c.restart(victim)
	time.Sleep(4 * time.Second)
	close(stop)
	wg.Wait()
	c.waitHealthy(60*time.Second, "after "+victim+" returned")
	// Every copy holds the same omap: a scrub finds nothing to repair.
	out, err := c.cli(nil, "scrub", "--json", "default")
	if err != nil {
		t.Fatalf("scrub: %v\n%s", err, out)
	}
	var scrub map[string]any
	if err := json.Unmarshal(out, &scrub); err != nil || scrub["errors"] != float64(0) {
		t.Fatalf("scrub after recovery: %s %v", out, err)
	}

	total, unknown := 0, 0
	for i, w := range writers {
		id := fmt.Sprintf("w%02d/", i)
		kvs := map[string][]byte{}
		for after := ""; ; {
			page, err := p.OmapListDelim(ctx, w.obj, id, "", after, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range page.Entries {
				kvs[kv.Key] = kv.Value
			}
			if !page.More {
				break
			}
			after = page.Next
		}
		last, _ := strconv.Atoi(string(kvs[id+"last"]))
		if last < w.acked {
			t.Fatalf("writer %d: last step %d, but step %d was acknowledged", i, last, w.acked)
		}
		for s := 1; s <= last; s++ {
			a, b := kvs[fmt.Sprintf("%s%06d/a", id, s)], kvs[fmt.Sprintf("%s%06d/b", id, s)]
			if string(a) != fmt.Sprint(s) || !bytes.Equal(b, bytes.Repeat([]byte{byte(s)}, 100+s%900)) {
				t.Fatalf("writer %d: step %d of %d is not whole: a=%q, %d bytes of b", i, s, last, a, len(b))
			}
		}
		if len(kvs) != 2*last+1 {
			t.Fatalf("writer %d: %d keys for %d steps: a transaction past the last step left keys", i, len(kvs), last)
		}
		if w.ownFailed > 0 {
			t.Errorf("writer %d: %d transactions were resent after they applied and failed on their own change", i, w.ownFailed)
		}
		total += last
		unknown += w.unknown
	}
	if ackedAfterKill.Load() < 50 {
		t.Fatalf("only %d transactions acknowledged after the kill: writes did not go on", ackedAfterKill.Load())
	}
	t.Logf("%d guarded transactions applied (%d acknowledged after %s was killed), %d with an unknown outcome; every acknowledged one there, none half-applied",
		total, ackedAfterKill.Load(), victim, unknown)
}

// TestOmapListDelim fills an omap with awkward keys and pages through it
// with prefixes, delimiters and limits, comparing every page with a model.
func TestOmapListDelim(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{})
	ctx := context.Background()
	p := c.pool("default")
	r := rand.New(rand.NewPCG(7, 11))
	parts := []string{"a", "b", "é", "日本", "/", "//", "+", "%2F", " ", "x/y", "-", "z", "~", "\u00a0"}
	set := map[string]bool{}
	for len(set) < 3000 {
		var b strings.Builder
		if r.IntN(12) == 0 {
			b.WriteString("\x00")
		}
		for j := 1 + r.IntN(7); j > 0; j-- {
			b.WriteString(parts[r.IntN(len(parts))])
		}
		set[b.String()] = true
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i := 0; i < len(keys); i += 500 {
		batch := map[string][]byte{}
		for _, k := range keys[i:min(i+500, len(keys))] {
			batch[k] = []byte("v:" + k)
		}
		if err := p.OmapApply(ctx, "listing", client.OmapTxn{Create: true, Set: batch}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.OmapListDelim(ctx, "nope", "", "/", "", 10); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("listing a missing object: %v", err)
	}
	type item struct {
		key      string
		isPrefix bool
	}
	model := func(prefix, delim, after string) []item {
		var out []item
		seen := map[string]bool{}
		for _, k := range keys {
			if k <= after || !strings.HasPrefix(k, prefix) || strings.HasPrefix(k, "\x00") && !strings.HasPrefix(prefix, "\x00") {
				continue
			}
			if i := strings.Index(k[len(prefix):], delim); delim != "" && i >= 0 {
				if cp := k[:len(prefix)+i+len(delim)]; cp > after && !seen[cp] {
					seen[cp] = true
					out = append(out, item{cp, true})
				}
				continue
			}
			out = append(out, item{k, false})
		}
		return out
	}
	pages, rounds := 0, 0
	for round := 0; round < 60; round++ {
		prefix := []string{"", "", "a", "a/", "é", "\x00", "\x00a", "//", "日本/"}[r.IntN(9)]
		if r.IntN(3) == 0 { // a prefix cut from a key, the delimiter inside it or not
			k := keys[r.IntN(len(keys))]
			prefix = k[:r.IntN(len(k)+1)]
			if !utf8Prefix(prefix) {
				prefix = ""
			}
		}
		delim := []string{"", "/", "/", "//", "é", "a", "x/y"}[r.IntN(7)]
		limit := 1 + r.IntN(50)
		want := model(prefix, delim, "")
		var got []item
		after := ""
		for {
			l, err := p.OmapListDelim(ctx, "listing", prefix, delim, after, limit)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if len(l.Entries)+len(l.Prefixes) > limit {
				t.Fatalf("a page of limit %d holds %d entries and %d prefixes", limit, len(l.Entries), len(l.Prefixes))
			}
			var page []item
			for _, e := range l.Entries {
				if string(e.Value) != "v:"+e.Key {
					t.Fatalf("value of %q: %q", e.Key, e.Value)
				}
				page = append(page, item{e.Key, false})
			}
			for _, pf := range l.Prefixes {
				page = append(page, item{pf, true})
			}
			slices.SortFunc(page, func(a, b item) int { return strings.Compare(a.key, b.key) })
			got = append(got, page...)
			if !l.More {
				break
			}
			after = l.Next
		}
		if !slices.Equal(got, want) {
			t.Fatalf("prefix %q delimiter %q limit %d: %d items listed, the model has %d\n got  %v\n want %v", prefix, delim, limit, len(got), len(want), got, want)
		}
		rounds++
	}
	t.Logf("%d keys: %d listings (%d pages) equal to the model", len(keys), rounds, pages)
}

func utf8Prefix(s string) bool { return strings.ToValidUTF8(s, "\ufffd") == s }
