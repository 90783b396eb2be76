package s3gw

import (
	"context"
	"encoding/xml"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cairn-storage/cairn/internal/s3/sigv4"
)

// Config describes a gateway.
type Config struct {
	// Store is the gateway's pool: the bucket registry, the index shards
	// and the data of buckets that name no data pool. It must keep omaps
	// (a replicated pool). Required.
	Store Store
	// DataPool names the pool the data of buckets created from now on
	// goes to ("": Store). A bucket's record keeps the pool it was
	// created with, so changing DataPool moves no existing bucket.
	DataPool string
	// DataStore opens the Store of a data pool by name, for DataPool and
	// the pools bucket records name (each opened once, then kept). It
	// answers ErrNoPool for a pool that does not exist. Required with
	// DataPool, or when a bucket record names a pool.
	DataStore func(pool string) (Store, error)
	// Lookup resolves access keys to secrets and users. Required.
	Lookup sigv4.Credentials
	// Region, if set, is the only region requests may be signed for.
	Region string
	// Domains are host names under which <bucket>.<domain> addresses a
	// bucket (virtual-host style); path style always works.
	Domains []string
	// GCGrace is how long replaced or deleted data stays readable for
	// GETs in flight before the collector deletes it (default 15 min).
	GCGrace time.Duration
	// IntentTimeout is how old a write's intent must be before the
	// collector takes its writer for dead and reclaims its data (default 1 h).
	IntentTimeout time.Duration
	// Logf receives what an operator should see (internal errors, the
	// collector's work); nil: nothing.
	Logf func(format string, args ...any)
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// Metrics, if set, counts requests by operation and outcome.
	Metrics *Metrics
	// IndexShardKeys is how many keys an index shard holds before it
	// splits in two (default 50,000).
	IndexShardKeys int
}

// Gateway serves the S3 API over a Store. It holds no state of its own but
// a short-lived cache of bucket records, so several gateways may serve
// one pool at once. It is an http.Handler, safe for concurrent use.
type Gateway struct {
	cfg      Config
	verifier *sigv4.Verifier
	buckets  bucketCache
	pools    dataPools // data pools opened, by name
	bufs     sync.Pool // stripe buffers
	probing  sync.Map  // index shards being counted for a split
	md5      md5Lanes  // the ETag MD5 of large bodies
}

// New returns a gateway; Run its collector alongside it.
func New(cfg Config) *Gateway {
	if cfg.GCGrace <= 0 {
		cfg.GCGrace = 15 * time.Minute
	}
	if cfg.IntentTimeout <= 0 {
		cfg.IntentTimeout = time.Hour
	}
	if cfg.IndexShardKeys <= 0 {
		cfg.IndexShardKeys = defaultIndexShardKeys
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	g := &Gateway{cfg: cfg}
	g.verifier = &sigv4.Verifier{Lookup: cfg.Lookup, Region: cfg.Region, BucketOfHost: g.virtualBucket}
	g.bufs.New = func() any { b := make([]byte, stripeSize); return &b }
	if m := cfg.Metrics; m != nil {
		g.md5.counted = func(how string) { m.md5Bodies.WithLabelValues(how).Inc() }
	}
	return g
}

func (g *Gateway) now() time.Time { return g.cfg.Now() }

// request is one S3 request being served.
type request struct {
	g      *Gateway
	w      http.ResponseWriter
	r      *http.Request
	ctx    context.Context
	id     string
	auth   *sigv4.Auth
	user   string
	bucket string
	key    string
	query  url.Values
	op     string // operation's name ("": none)
}

// Bounds of a request, beyond the header size http.Server enforces.
const (
	maxKeyBytes  = 1024
	maxMetaBytes = 2 << 10
	maxXMLBytes  = 1 << 20
	maxPutSize   = 5 << 30
)

// ServeHTTP authenticates a request, routes it to its operation and writes
// the operation's answer or its S3 error.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m := g.cfg.Metrics; m != nil {
		start := time.Now()
		mw := &measured{ResponseWriter: w, body: r.Body}
		r.Body = mw
		o := g.serve(mw, r)
		m.observe(o.op, o.code, start, mw)
		return
	}
	g.serve(w, r)
}

// outcome is what a request was and how it ended, for the metrics.
type outcome struct{ op, code string }

func (g *Gateway) serve(w http.ResponseWriter, r *http.Request) outcome {
	if r.ContentLength == 0 && r.ProtoAtLeast(1, 1) && strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		// net/http sends 100 Continue when a handler first reads a body,
		// which an empty one never needs. S3 sends it anyway, and botocore
		// (aws-cli, boto3) expects it: given only the final answer, it
		// misreads the next answer on that connection and waits 60 s for
		// a body that never comes, then sends the request again.
		w.WriteHeader(http.StatusContinue)
	}
	rq := &request{g: g, w: w, r: r, ctx: r.Context(), id: newID()}
	h := w.Header()
	h.Set("x-amz-request-id", rq.id)
	h.Set("x-amz-id-2", rq.id)
	h.Set("Server", "cairn")
	if err := rq.serve(); err != nil {
		e, known := asS3(err)
		if !known {
			g.cfg.Logf("s3: %s %s: %v (request %s)", r.Method, r.URL.Path, err, rq.id)
		}
		drainBody(r)
		writeError(w, r, e, rq.id)
		return outcome{rq.op, e.Code}
	}
	return outcome{rq.op, "OK"}
}

// drainMax bounds the body the gateway reads to its end, unused, before
// answering with an error: a client still sending its body when the answer
// comes sees a broken pipe instead of the answer (a PUT refused at its
// first step, before its body, for a full cluster); a larger body is not
// worth reading for nothing. A client that sent Expect: 100-continue is
// read from too: it sends its body anyway once it has waited long enough
// for the 100 (the AWS SDK for Go, a second), and the answer may take
// longer than that.
const drainMax = 16 << 20

func drainBody(r *http.Request) {
	if r.ContentLength <= 0 || r.ContentLength > drainMax {
		return
	}
	io.Copy(io.Discard, io.LimitReader(r.Body, drainMax))
}

func (rq *request) serve() error {
	q, err := url.ParseQuery(rq.r.URL.RawQuery)
	if err != nil {
		return ErrInvalidArgument.with("The query string is malformed.")
	}
	rq.query = q
	if err := rq.route(); err != nil {
		return err
	}
	rq.op = operation(rq.r.Method, rq.bucket, rq.key, q, rq.r.Header)
	auth, err := rq.g.verifier.Verify(rq.r)
	if err != nil {
		return err
	}
	if auth.Anonymous {
		return ErrAccessDenied.with("Anonymous access is not allowed; sign the request.")
	}
	rq.auth, rq.user = auth, auth.User
	return rq.dispatch()
}

// route finds the bucket and key: virtual-host style when the Host is
// <bucket>.<domain> of a configured domain, else path style
// /<bucket>/<key>. The key is the decoded path as sent: '/' runs and a
// trailing '/' are part of it.
func (rq *request) route() error {
	path := rq.r.URL.Path
	if !strings.HasPrefix(path, "/") {
		return ErrInvalidArgument.with("The request path must start with '/'.")
	}
	if b := rq.g.virtualBucket(rq.r.Host); b != "" {
		rq.bucket, rq.key = b, path[1:]
		return rq.checkKey()
	}
	rq.bucket, rq.key, _ = strings.Cut(path[1:], "/")
	return rq.checkKey()
}

// virtualBucket is the bucket a Host of <bucket>.<domain> names, for a
// configured domain; "" for any other Host (a path-style request).
func (g *Gateway) virtualBucket(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		host = host[:i]
	}
	for _, d := range g.cfg.Domains {
		if b, ok := strings.CutSuffix(host, "."+d); ok && b != "" {
			return b
		}
	}
	return ""
}

func (rq *request) checkKey() error { return checkKey(rq.key) }

// checkKey says what is wrong with an object key, if anything.
func checkKey(key string) error {
	switch {
	case len(key) > maxKeyBytes:
		return ErrKeyTooLong.with("Your key is %d bytes; the limit is %d.", len(key), maxKeyBytes)
	case strings.IndexByte(key, 0) >= 0:
		return ErrInvalidArgument.with("Object keys may not contain a NUL character.")
	case !utf8.ValidString(key):
		return ErrInvalidArgument.with("Object keys must be UTF-8.")
	}
	return nil
}

// unsupported are the subresources of S3 this gateway does not serve: a
// request naming one is NotImplemented, never served as something else.
var unsupported = []string{"acl", "policy", "cors", "lifecycle", "tagging", "versioning", "website",
	"replication", "encryption", "logging", "notification", "object-lock", "retention", "legal-hold",
	"torrent", "restore", "select", "accelerate", "requestPayment", "ownershipControls",
	"publicAccessBlock", "analytics", "inventory", "metrics", "intelligent-tiering",
	"versions", "policyStatus", "renameObject", "session"}

func (rq *request) subresource() string {
	for _, s := range unsupported {
		if rq.query.Has(s) {
			return s
		}
	}
	if v := rq.query.Get("versionId"); rq.query.Has("versionId") && v != "null" {
		return "versionId"
	}
	return ""
}

func (rq *request) dispatch() error {
	if s := rq.subresource(); s != "" && rq.op != "GetBucketVersioning" {
		return ErrNotImplemented.with("The %q subresource is not implemented by this gateway.", s)
	}
	h, ok := handlers[rq.op]
	if !ok {
		return ErrMethodNotAllowed
	}
	return h(rq)
}

// operation names, as AWS does, the S3 operation a request asks for ("":
// none this gateway knows). It alone decides where a request goes
// (handlers), and its answer labels the gateway's metrics.
func operation(m, bucket, key string, q url.Values, h http.Header) string {
	switch {
	case bucket == "":
		if m == http.MethodGet {
			return "ListBuckets"
		}
		return ""
	case key == "":
		return bucketOperation(m, q)
	}
	upload, copySrc := q.Has("uploadId"), h.Get("x-amz-copy-source") != ""
	switch m {
	case http.MethodPut:
		switch {
		case upload && copySrc:
			return "UploadPartCopy"
		case upload || q.Has("partNumber"):
			return "UploadPart"
		case copySrc:
			return "CopyObject"
		}
		return "PutObject"
	case http.MethodGet:
		switch {
		case upload:
			return "ListParts"
		case q.Has("attributes"):
			return "GetObjectAttributes"
		}
		return "GetObject"
	case http.MethodHead:
		return "HeadObject"
	case http.MethodDelete:
		if upload {
			return "AbortMultipartUpload"
		}
		return "DeleteObject"
	case http.MethodPost:
		switch {
		case q.Has("uploads"):
			return "CreateMultipartUpload"
		case upload:
			return "CompleteMultipartUpload"
		}
	}
	return ""
}

func bucketOperation(m string, q url.Values) string {
	switch m {
	case http.MethodPut:
		return "CreateBucket"
	case http.MethodHead:
		return "HeadBucket"
	case http.MethodDelete:
		return "DeleteBucket"
	case http.MethodGet:
		switch {
		case q.Has("versioning"):
			return "GetBucketVersioning"
		case q.Has("location"):
			return "GetBucketLocation"
		case q.Has("uploads"):
			return "ListMultipartUploads"
		case q.Has("list-type"):
			return "ListObjectsV2"
		}
		return "ListObjects"
	case http.MethodPost:
		if q.Has("delete") {
			return "DeleteObjects"
		}
	}
	return ""
}

// handlers serve each operation.
var handlers = map[string]func(*request) error{
	"ListBuckets":          (*request).listBuckets,
	"CreateBucket":         (*request).createBucket,
	"HeadBucket":           (*request).headBucket,
	"DeleteBucket":         (*request).deleteBucket,
	"GetBucketVersioning":  (*request).bucketVersioning,
	"GetBucketLocation":    (*request).bucketLocation,
	"ListMultipartUploads": (*request).listUploads,
	"ListObjectsV2": func(rq *request) error {
		if rq.query.Get("list-type") != "2" {
			return ErrInvalidArgument.with("list-type must be 2.")
		}
		return rq.listObjects(true)
	},
	"ListObjects":             func(rq *request) error { return rq.listObjects(false) },
	"DeleteObjects":           (*request).deleteObjects,
	"UploadPartCopy":          (*request).uploadPartCopy,
	"UploadPart":              (*request).uploadPart,
	"CopyObject":              (*request).copyObject,
	"PutObject":               (*request).putObject,
	"ListParts":               (*request).listParts,
	"GetObject":               func(rq *request) error { return rq.getObject(false) },
	"HeadObject":              func(rq *request) error { return rq.getObject(true) },
	"GetObjectAttributes":     (*request).objectAttributes,
	"AbortMultipartUpload":    (*request).abortUpload,
	"DeleteObject":            (*request).deleteObject,
	"CreateMultipartUpload":   (*request).createUpload,
	"CompleteMultipartUpload": (*request).completeUpload,
}

// writeXML answers status with v as an XML document.
func (rq *request) writeXML(status int, v any) error {
	body, err := xml.Marshal(v)
	if err != nil {
		return err
	}
	h := rq.w.Header()
	h.Set("Content-Type", "application/xml")
	h.Set("Content-Length", strconv.Itoa(len(xml.Header)+len(body)))
	rq.w.WriteHeader(status)
	rq.w.Write([]byte(xml.Header))
	rq.w.Write(body)
	return nil
}

// readXML reads a request's XML body (at most maxXMLBytes) into v.
func (rq *request) readXML(v any) error {
	b, err := readAllBounded(rq.auth.Body, maxXMLBytes)
	if err != nil {
		return err
	}
	if err := xml.Unmarshal(b, v); err != nil {
		return ErrMalformedXML
	}
	return nil
}

func readAllBounded(r io.Reader, limit int) ([]byte, error) {
	var buf []byte
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if len(buf) > limit {
			return nil, ErrMaxMessageLength.with("The XML body is larger than %d bytes.", limit)
		}
		if err != nil {
			if err == io.EOF {
				return buf, nil
			}
			return nil, err
		}
	}
}

const s3NS = "http://s3.amazonaws.com/doc/2006-03-01/"

// isoTime formats times as S3's XML does.
func isoTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
