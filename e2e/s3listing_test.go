package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// awkwardParts are the pieces awkward keys are made of: unicode, '+',
// '%' (alone and as an escape a decoder might apply twice), spaces and
// runs of '/'.
var awkwardParts = []string{"a", "b", "/", "//", "///", "+", "%", " ", "ü", "日本", "dir/", "x+y", "%2F", "~", "a b", "%20"}

// awkwardDelims are the delimiters listed with: none, and one of every
// kind of piece above, multi-byte ones included.
var awkwardDelims = []string{"", "/", "//", "+", "%", " ", "ü", "日本", "a", "%2F", "x+y"}

// awkwardPrefixes are the prefixes listed with.
var awkwardPrefixes = []string{"", "a", "dir/", "/", "日本", "%", "a b"}

// awkwardKeys makes n distinct keys of 1 to 6 awkward pieces, sorted.
func awkwardKeys(n int, rng *rand.Rand) []string {
	seen := map[string]bool{}
	var keys []string
	for len(keys) < n {
		var b strings.Builder
		for i := 0; i < 1+rng.IntN(6); i++ {
			b.WriteString(awkwardParts[rng.IntN(len(awkwardParts))])
		}
		if k := b.String(); !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// listStats times the listing requests.
type listStats struct {
	mu    sync.Mutex
	pages []time.Duration
}

func (s *listStats) add(d time.Duration) {
	s.mu.Lock()
	s.pages = append(s.pages, d)
	s.mu.Unlock()
}

// quantile returns the q-quantile of the page times.
func (s *listStats) quantile(q float64) time.Duration {
	p := slices.Clone(s.pages)
	slices.Sort(p)
	if len(p) == 0 {
		return 0
	}
	return p[min(len(p)-1, int(q*float64(len(p))))]
}

// maxKeysSweep is the max-keys values one (prefix, delimiter) is listed
// with: every value from 1 to 1,000 when full, else a sample (the
// boundaries, and random values) whose pages stay within a budget, for a
// listing of n items.
func maxKeysSweep(full bool, n int, rng *rand.Rand) []int32 {
	if full {
		var all []int32
		for mk := int32(1); mk <= 1000; mk++ {
			all = append(all, mk)
		}
		return all
	}
	var out []int32
	for _, mk := range []int32{1, 2, 3, 7, 99, 100, 101, 999, 1000, 1 + rng.Int32N(1000), 1 + rng.Int32N(50)} {
		if n/int(mk) <= 100 {
			out = append(out, mk)
		}
	}
	return out
}

// TestS3ListingAwkwardKeys lists awkward keys (unicode, '+', '%', spaces,
// '/' runs) through the cluster's own delimiter listing, with every
// delimiter of awkwardDelims under several prefixes, and compares each
// listing with the one computed the dumb way over all keys: V2 through
// the AWS SDK's paginator with max-keys from 1 to 1,000, and V1 through
// its markers, its keys URL-encoded (encoding-type=url). Four listings
// run at once. make test puts 3,000 keys and samples the max-keys values,
// keeping each listing to a hundred pages; CAIRN_S3_LIST_FULL=1 puts
// the 10,000 and sweeps all 1,000 values for every delimiter and
// prefix, which lists every key about a thousand times over for each
// (delimiter, prefix): a long run, not one for make test. Every page but the last must be full (a short page is a
// round trip more). It logs the page times and fails if the slowest
// pages take a second, which no page of one round trip should.
func TestS3ListingAwkwardKeys(t *testing.T) {
	t.Parallel()
	full := os.Getenv("CAIRN_S3_LIST_FULL") == "1"
	n := 3000
	if full {
		n = 10000
	}
	c := startCluster(t, clusterOpts{s3: true})
	cl := sdkClient(c.s3Info())
	ctx := context.Background()
	if _, err := cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("awkward")}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	keys := awkwardKeys(n, rng)
	putKeys(t, cl, "awkward", keys)
	checkBucketStat(t, c, "awkward", keys)
	var st listStats
	start := time.Now()
	var jobs []func() error
	for _, delim := range awkwardDelims {
		for _, prefix := range awkwardPrefixes {
			want := awkwardOracle(keys, prefix, delim)
			for _, mk := range maxKeysSweep(full, len(want), rng) {
				jobs = append(jobs, func() error { return listV2(cl, &st, prefix, delim, mk, want) })
			}
			mk := 1 + rng.Int32N(1000)
			jobs = append(jobs, func() error { return listV1URL(cl, &st, prefix, delim, mk, want) })
		}
	}
	runJobs(t, jobs, 4)
	p50, p99, worst := st.quantile(0.5), st.quantile(0.99), st.quantile(1)
	t.Logf("%d listings, %d pages in %.1f s: a page takes %v (p50), %v (p99), %v (max)",
		len(jobs), len(st.pages), time.Since(start).Seconds(), p50, p99, worst)
	if p99 > time.Second {
		t.Errorf("listing pages are slow: p99 %v", p99)
	}
}

// runJobs runs jobs, at most par at once, and fails with the first error
// (the others stop being started).
func runJobs(t *testing.T, jobs []func() error, par int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	sem := make(chan struct{}, par)
	for _, job := range jobs {
		sem <- struct{}{}
		mu.Lock()
		stop := first != nil
		mu.Unlock()
		if stop {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := job(); err != nil {
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

// putKeys puts every key, its body the key itself, 16 at once.
func putKeys(t *testing.T, cl *s3.Client, bucket string, keys []string) {
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := cl.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(k), Body: strings.NewReader(k)}); err != nil {
				t.Errorf("put %q: %v", k, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("put %d keys in %.1f s", len(keys), time.Since(start).Seconds())
}

// checkBucketStat: cairn s3 bucket stat counts the keys and their bytes,
// and bucket ls names the bucket and its owner.
func checkBucketStat(t *testing.T, c *cluster, bucket string, keys []string) {
	out, err := c.cli(nil, "s3", "bucket", "stat", bucket, "--json")
	var st struct{ Objects, Bytes int }
	if err != nil || json.Unmarshal(out, &st) != nil {
		t.Fatalf("cairn s3 bucket stat: %v\n%s", err, out)
	}
	total := 0
	for _, k := range keys {
		total += len(k)
	}
	if st.Objects != len(keys) || st.Bytes != total {
		t.Fatalf("cairn s3 bucket stat: %d objects and %d bytes, want %d and %d", st.Objects, st.Bytes, len(keys), total)
	}
	if out, err := c.cli(nil, "s3", "bucket", "ls"); err != nil || !strings.Contains(string(out), bucket) || !strings.Contains(string(out), "admin") {
		t.Fatalf("cairn s3 bucket ls: %v\n%s", err, out)
	}
}

// pageItems are a page's keys and common prefixes ("P:" + prefix) in key
// order.
func pageItems(contents []types.Object, prefixes []types.CommonPrefix, decode func(string) string) []string {
	var items []string
	for _, o := range contents {
		items = append(items, decode(*o.Key))
	}
	for _, cp := range prefixes {
		items = append(items, "P:"+decode(*cp.Prefix))
	}
	sort.Slice(items, func(i, j int) bool { return strings.TrimPrefix(items[i], "P:") < strings.TrimPrefix(items[j], "P:") })
	return items
}

// listV2 lists through the SDK's ListObjectsV2 paginator and compares.
func listV2(cl *s3.Client, st *listStats, prefix, delim string, mk int32, want []string) error {
	var got []string
	pages := 0
	p := s3.NewListObjectsV2Paginator(cl, &s3.ListObjectsV2Input{Bucket: aws.String("awkward"), Prefix: aws.String(prefix),
		Delimiter: aws.String(delim), MaxKeys: aws.Int32(mk)})
	for p.HasMorePages() {
		start := time.Now()
		page, err := p.NextPage(context.Background())
		st.add(time.Since(start))
		if err != nil {
			return err
		}
		items := pageItems(page.Contents, page.CommonPrefixes, func(s string) string { return s })
		if int32(len(items)) > mk || aws.ToInt32(page.KeyCount) != int32(len(items)) {
			return fmt.Errorf("V2 prefix %q delimiter %q: a page of %d items (KeyCount %d) for max-keys %d", prefix, delim, len(items), aws.ToInt32(page.KeyCount), mk)
		}
		got = append(got, items...)
		if pages++; len(got) > len(want) {
			break
		}
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("V2 prefix %q delimiter %q max-keys %d:\n%s", prefix, delim, mk, listingDiff(got, want))
	}
	// Every page but the last is full, and the last says it is the last.
	if full := max(1, (len(want)+int(mk)-1)/int(mk)); pages != full {
		return fmt.Errorf("V2 prefix %q delimiter %q max-keys %d: %d items in %d pages, want %d", prefix, delim, mk, len(want), pages, full)
	}
	return nil
}

// listV1URL lists with ListObjects (V1) and its markers, keys URL-encoded
// by the gateway and decoded here, and compares.
func listV1URL(cl *s3.Client, st *listStats, prefix, delim string, mk int32, want []string) error {
	var bad error
	decode := func(s string) string {
		d, err := url.PathUnescape(s)
		if err != nil && bad == nil {
			bad = fmt.Errorf("V1 encoding-type=url: %q: %v", s, err)
		}
		return d
	}
	var got []string
	marker := ""
	for page := 0; page <= len(want); page++ {
		start := time.Now()
		out, err := cl.ListObjects(context.Background(), &s3.ListObjectsInput{Bucket: aws.String("awkward"), Prefix: aws.String(prefix),
			Delimiter: aws.String(delim), MaxKeys: aws.Int32(mk), Marker: aws.String(marker), EncodingType: types.EncodingTypeUrl})
		st.add(time.Since(start))
		if err != nil {
			return err
		}
		got = append(got, pageItems(out.Contents, out.CommonPrefixes, decode)...)
		if bad != nil {
			return bad
		}
		if !aws.ToBool(out.IsTruncated) {
			break
		}
		marker = decode(aws.ToString(out.NextMarker))
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("V1 encoding-type=url prefix %q delimiter %q max-keys %d:\n%s", prefix, delim, mk, listingDiff(got, want))
	}
	return nil
}

// listingDiff says where two listings part.
func listingDiff(got, want []string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	at := func(l []string) string {
		if i < len(l) {
			return fmt.Sprintf("%q", l[i:min(len(l), i+3)])
		}
		return "the end"
	}
	return fmt.Sprintf("%d items, want %d; from item %d got %s, want %s", len(got), len(want), i, at(got), at(want))
}

// awkwardOracle lists keys with prefix, those holding delim past the
// prefix rolled into common prefixes ("P:" + prefix), in order.
func awkwardOracle(keys []string, prefix, delim string) []string {
	var out []string
	seen := map[string]bool{}
	for _, k := range keys {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if i := strings.Index(k[len(prefix):], delim); delim != "" && i >= 0 {
			cp := k[:len(prefix)+i+len(delim)]
			if !seen[cp] {
				seen[cp] = true
				out = append(out, "P:"+cp)
			}
			continue
		}
		out = append(out, k)
	}
	return out
}
