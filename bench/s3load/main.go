// Command s3load is the S3 load generator bench/s3-vs-minio.sh runs against
// cairn's gateway and MinIO alike: one phase of PUTs, GETs or deletes of
// objects of one size, with a fixed number of clients, for a fixed time;
// or of ListObjectsV2 pages of 1,000 keys starting at random places in a
// bucket (bench/s3-listing.sh).
// It prints objects/s, MiB/s and latency percentiles, and, given the pids
// of the server's processes, the CPU they spent during the phase.
//
// It is a separate main that imports nothing of cairn, so both servers are
// driven by exactly the same client code (aws-sdk-go-v2 with its default
// checksums and signing, as applications run it).
//
//	s3load -creds s3.json -bucket b -op put -size 4MiB -clients 16 -duration 10s -max-objects 512
//	s3load -creds s3.json -bucket b -op get -size 4MiB -objects 512 -duration 10s
//	s3load -creds s3.json -bucket b -op delete -objects 512
//	s3load -creds s3.json -bucket b -op put -size 1 -first 10000 -max-objects 90000 -duration 1h
//	s3load -creds s3.json -bucket b -op list -objects 100000 -clients 4 -duration 15s
//	s3load -null-listen 127.0.0.1:19990   # an S3 endpoint that stores nothing
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the command line of one phase.
type options struct {
	creds      string
	bucket     string
	prefix     string
	op         string
	size       int64
	clients    int
	duration   time.Duration
	maxObjects int64
	first      int64
	objects    int64
	pids       []int
	frontPids  []int // of pids, those the clients talk to
	clkTck     int64
	label      string
	asJSON     bool
	header     bool
	nullListen string
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "s3load:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.nullListen != "" {
		err = serveNull(ctx, o.nullListen)
	} else {
		err = runPhase(ctx, o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "s3load:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	var size, pids, front string
	fs := flag.NewFlagSet("s3load", flag.ContinueOnError)
	fs.StringVar(&o.creds, "creds", "", "JSON file with endpoint, access_key and secret_key (the format of cairn dev's s3.json)")
	fs.StringVar(&o.bucket, "bucket", "s3load", "bucket (created if missing)")
	fs.StringVar(&o.prefix, "prefix", "obj", "key prefix; object i is PREFIX/%08d")
	fs.StringVar(&o.op, "op", "put", "put, get, delete or list")
	fs.StringVar(&size, "size", "4MiB", "object size: 4096, 4KiB, 4MiB")
	fs.IntVar(&o.clients, "clients", 16, "concurrent clients, each with one request in flight")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long a put or get phase issues requests")
	fs.Int64Var(&o.maxObjects, "max-objects", 1<<20, "put: stop early after this many objects (bounds the data written)")
	fs.Int64Var(&o.first, "first", 0, "put: the number of the first object written (so phases can add to a bucket)")
	fs.Int64Var(&o.objects, "objects", 0, "get, delete and list: the objects PREFIX/0.. that put phases wrote (list: and nothing else in the bucket)")
	fs.StringVar(&pids, "pids", "", "comma-separated pids of the server's processes, whose CPU time the phase reports")
	fs.StringVar(&front, "front-pids", "", "of -pids, those the clients talk to (a gateway, the server they connect to): their CPU is reported apart too")
	fs.Int64Var(&o.clkTck, "clk-tck", 100, "clock ticks per second of /proc/PID/stat (getconf CLK_TCK)")
	fs.StringVar(&o.label, "label", "", "name of the target in the output")
	fs.BoolVar(&o.asJSON, "json", false, "print the result as one JSON object")
	fs.BoolVar(&o.header, "header", false, "print the table header before the row")
	fs.StringVar(&o.nullListen, "null-listen", "", "serve an S3 endpoint that stores nothing on this address, until interrupted")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.nullListen != "" {
		return o, nil
	}
	n, err := parseSize(size)
	if err != nil {
		return o, err
	}
	o.size = n
	if o.pids, err = parsePids(pids); err != nil {
		return o, err
	}
	if o.frontPids, err = parsePids(front); err != nil {
		return o, err
	}
	for _, p := range o.frontPids {
		if !slices.Contains(o.pids, p) {
			return o, fmt.Errorf("-front-pids: %d is not one of -pids", p)
		}
	}
	return o, o.check()
}

func (o options) check() error {
	switch {
	case o.creds == "":
		return fmt.Errorf("-creds is required")
	case o.op != "put" && o.op != "get" && o.op != "delete" && o.op != "list":
		return fmt.Errorf("-op must be put, get, delete or list, not %q", o.op)
	case o.first < 0:
		return fmt.Errorf("-first must not be negative")
	case o.clients < 1 || o.clients > 1024:
		return fmt.Errorf("-clients must be 1 to 1024")
	case o.op != "put" && o.objects < 1:
		return fmt.Errorf("-op %s needs -objects (how many the put phase wrote)", o.op)
	case o.size < 1 || o.size > 1<<30:
		return fmt.Errorf("-size must be 1 B to 1 GiB")
	}
	return nil
}

// parseSize reads 4096, 4K, 4KiB, 4M or 4MiB.
func parseSize(s string) (int64, error) {
	mult := int64(1)
	t := strings.TrimSuffix(strings.TrimSuffix(s, "iB"), "B")
	switch {
	case strings.HasSuffix(t, "K"):
		mult, t = 1<<10, strings.TrimSuffix(t, "K")
	case strings.HasSuffix(t, "M"):
		mult, t = 1<<20, strings.TrimSuffix(t, "M")
	case strings.HasSuffix(t, "G"):
		mult, t = 1<<30, strings.TrimSuffix(t, "G")
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}

func parsePids(s string) ([]int, error) {
	var out []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		p, err := strconv.Atoi(f)
		if err != nil || p < 1 {
			return nil, fmt.Errorf("bad pid %q", f)
		}
		out = append(out, p)
	}
	return out, nil
}

// runPhase runs one phase and prints its result.
func runPhase(ctx context.Context, o options) error {
	cl, err := newClient(o.creds, o.clients)
	if err != nil {
		return err
	}
	if o.op == "put" {
		if err := cl.ensureBucket(ctx, o.bucket); err != nil {
			return err
		}
	}
	res, err := cl.phase(ctx, o)
	if err != nil {
		return err
	}
	if o.asJSON {
		if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
			return err
		}
	} else {
		if o.header {
			fmt.Println(tableHeader)
		}
		fmt.Println(res.row())
	}
	if res.Errors > 0 {
		return fmt.Errorf("%d of %d requests failed, the first: %s", res.Errors, res.Ops+res.Errors, res.FirstError)
	}
	return nil
}
