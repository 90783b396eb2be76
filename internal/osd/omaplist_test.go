package osd

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cairn-storage/cairn/internal/objstore"
	"github.com/cairn-storage/cairn/internal/proto"
)

// sliceSeeker is an omapSeeker over sorted keys that counts its moves.
type sliceSeeker struct {
	keys  []string
	i     int
	moves int
}

func (s *sliceSeeker) SeekGE(k []byte) bool {
	s.moves++
	s.i = sort.SearchStrings(s.keys, string(k))
	return s.i < len(s.keys)
}
func (s *sliceSeeker) Next() bool    { s.moves++; s.i++; return s.i < len(s.keys) }
func (s *sliceSeeker) Key() []byte   { return []byte(s.keys[s.i]) }
func (s *sliceSeeker) Value() []byte { return []byte("v:" + s.keys[s.i]) }

// modelItem is one line of a listing: an entry, or a common prefix.
type modelItem struct {
	key      string
	isPrefix bool
}

// modelList is the listing by definition, over every key: what listDelim
// must return page by page.
func modelList(keys []string, prefix, delim, after string) []modelItem {
	var out []modelItem
	seen := map[string]bool{}
	for _, k := range keys {
		if k <= after || !strings.HasPrefix(k, prefix) {
			continue
		}
		if strings.HasPrefix(k, "\x00") && !strings.HasPrefix(prefix, "\x00") {
			continue
		}
		if i := strings.Index(k[len(prefix):], delim); delim != "" && i >= 0 {
			cp := k[:len(prefix)+i+len(delim)]
			if cp > after && !seen[cp] {
				seen[cp] = true
				out = append(out, modelItem{cp, true})
			}
			continue
		}
		out = append(out, modelItem{k, false})
	}
	return out
}

// items merges a page's entries and prefixes in key order.
func (l delimListing) items() []modelItem {
	var out []modelItem
	for _, e := range l.entries {
		out = append(out, modelItem{string(e.Key), false})
	}
	for _, p := range l.prefixes {
		out = append(out, modelItem{string(p), true})
	}
	slices.SortFunc(out, func(a, b modelItem) int { return strings.Compare(a.key, b.key) })
	return out
}

// randomKeys draws keys that make a delimiter listing work: unicode, runs
// of the delimiter, the delimiter at both ends, NUL-prefixed bookkeeping
// keys, 0xff bytes.
func randomKeys(r *rand.Rand, n int) []string {
	parts := []string{"a", "b", "é", "日本", "/", "//", "+", "%20", " ", "x/y", "\xff", "-", "z"}
	set := map[string]bool{}
	for len(set) < n {
		var b strings.Builder
		if r.IntN(10) == 0 {
			b.WriteString("\x00")
		}
		for j := 1 + r.IntN(6); j > 0; j-- {
			b.WriteString(parts[r.IntN(len(parts))])
		}
		set[b.String()] = true
	}
	keys := make([]string, 0, n)
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestListDelimModel pages through random omaps with random prefixes,
// delimiters and limits and compares every page with the model: each
// page is the model's next items, each common prefix appears once, the
// pages together are the whole listing, and a page costs moves in
// proportion to what it returns, not to the keys under its prefixes.
func TestListDelimModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 400; round++ {
		keys := randomKeys(r, 1+r.IntN(300))
		prefixes := []string{"", "", "a", "a/", "é", "\x00", "\x00a", "x/", "//", keys[r.IntN(len(keys))]}
		delims := []string{"", "/", "/", "//", "é", "a", "x/y"}
		prefix := prefixes[r.IntN(len(prefixes))]
		if r.IntN(4) == 0 { // a prefix that holds the delimiter, cut anywhere
			k := keys[r.IntN(len(keys))]
			prefix = k[:r.IntN(len(k)+1)]
		}
		delim := delims[r.IntN(len(delims))]
		limit := 1 + r.IntN(50)
		want := modelList(keys, prefix, delim, "")
		var got []modelItem
		after := ""
		if r.IntN(5) == 0 { // start after any string (S3's start-after)
			after = keys[r.IntN(len(keys))]
			want = modelList(keys, prefix, delim, after)
		}
		for page := 0; ; page++ {
			if page > len(keys)+1 {
				t.Fatalf("round %d: listing does not end", round)
			}
			it := &sliceSeeker{keys: keys}
			l := listDelim(it, []byte(prefix), []byte(delim), []byte(after), limit, 1<<20)
			items := l.items()
			wantPage := modelList(keys, prefix, delim, after)
			more := len(wantPage) > limit
			if more {
				wantPage = wantPage[:limit]
			}
			if !slices.Equal(items, wantPage) || l.more != more {
				t.Fatalf("round %d page %d (prefix %q delim %q after %q limit %d):\n got  %v more=%v\n want %v more=%v",
					round, page, prefix, delim, after, limit, items, l.more, wantPage, more)
			}
			if it.moves > 2*len(items)+3 {
				t.Fatalf("round %d: a page of %d items took %d moves", round, len(items), it.moves)
			}
			got = append(got, items...)
			if !l.more {
				break
			}
			after = items[len(items)-1].key
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: pages together differ from the listing:\n got  %v\n want %v", round, got, want)
		}
	}
}

// TestListDelimSkipsPrefixes: a million keys under one common prefix cost
// one seek, and the byte bound cuts a page but never empties it.
func TestListDelimSkipsPrefixes(t *testing.T) {
	keys := []string{"a", "b/"}
	for i := 0; i < 100000; i++ {
		keys = append(keys, "b/"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+strings.Repeat("y", i/26%50))
	}
	keys = append(keys, "c")
	slices.Sort(keys)
	keys = slices.Compact(keys)
	it := &sliceSeeker{keys: keys}
	l := listDelim(it, nil, []byte("/"), nil, 10, 1<<20)
	if got := l.items(); !slices.Equal(got, []modelItem{{"a", false}, {"b/", true}, {"c", false}}) || l.more {
		t.Fatalf("got %v more=%v", got, l.more)
	}
	if it.moves > 5 {
		t.Fatalf("%d moves over %d keys", it.moves, len(keys))
	}
	it = &sliceSeeker{keys: keys}
	l = listDelim(it, nil, nil, nil, 1000, 1)
	if len(l.entries) != 1 || !l.more {
		t.Fatalf("byte bound: %d entries, more=%v", len(l.entries), l.more)
	}
	if prefixEnd([]byte("\xff\xff")) != nil || !bytes.Equal(prefixEnd([]byte("a\xff")), []byte("b")) {
		t.Fatal("prefixEnd")
	}
}

// TestListDelimStore runs the listing over the object store's iterator.
func TestListDelimStore(t *testing.T) {
	st, err := objstore.Open(objstore.Options{Dir: t.TempDir(), ReserveBytes: -1, DataCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := rand.New(rand.NewPCG(3, 4))
	keys := randomKeys(r, 500)
	var txn objstore.Txn
	for _, k := range keys {
		txn.OmapSet("1.0", "idx", []byte(k), []byte("v:"+k))
	}
	if err := st.Apply(&txn); err != nil {
		t.Fatal(err)
	}
	for _, delim := range []string{"", "/", "//"} {
		var got []modelItem
		after := ""
		for {
			it, err := st.NewOmapIter("1.0", "idx")
			if err != nil {
				t.Fatal(err)
			}
			l := listDelim(it, nil, []byte(delim), []byte(after), 7, 1<<20)
			for _, e := range l.entries {
				if string(e.Value) != "v:"+string(e.Key) {
					t.Fatalf("value of %q: %q", e.Key, e.Value)
				}
			}
			if err := it.Close(); err != nil {
				t.Fatal(err)
			}
			items := l.items()
			got = append(got, items...)
			if !l.more {
				break
			}
			after = items[len(items)-1].key
		}
		if want := modelList(keys, "", delim, ""); !slices.Equal(got, want) {
			t.Fatalf("delim %q: got %d items, want %d", delim, len(got), len(want))
		}
	}
}

// The proto limits are the object store's.
func TestOmapLimitsAgree(t *testing.T) {
	if proto.MaxKeyLen != objstore.MaxOmapKeyLen || proto.MaxOmapValueLen != objstore.MaxOmapValueLen {
		t.Fatalf("proto allows keys of %d and values of %d bytes, objstore %d and %d",
			proto.MaxKeyLen, proto.MaxOmapValueLen, objstore.MaxOmapKeyLen, objstore.MaxOmapValueLen)
	}
}
