package sigv4

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The values of x-amz-content-sha256 that are not a hex SHA-256.
const (
	UnsignedPayload          = "UNSIGNED-PAYLOAD"
	StreamingSigned          = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	StreamingSignedTrailer   = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
	StreamingUnsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
)

// Limits of what Verify accepts. Requests beyond them are refused before any
// work proportional to their size is done.
const (
	MaxSkew          = 15 * time.Minute   // |request time − now| of a header-signed request
	MaxPresignExpiry = 7 * 24 * time.Hour // largest X-Amz-Expires
	MaxChunkBytes    = 16 << 20           // largest aws-chunked chunk
	MaxSignedHeaders = 128                // entries of SignedHeaders
	MaxAuthBytes     = 8 << 10            // Authorization header
	MaxPathBytes     = 16 << 10           // escaped request path
	MaxQueryBytes    = 64 << 10           // raw query string
	MaxQueryParams   = 512                // parameters of the query string
	MaxTrailerBytes  = 4 << 10            // trailer section of an aws-chunked body
	MaxTrailers      = 8                  // trailers, and names in x-amz-trailer
	maxDecodedLength = 5 << 40            // x-amz-decoded-content-length: S3's largest object
)

const (
	algorithm  = "AWS4-HMAC-SHA256"
	iso8601    = "20060102T150405Z"
	service    = "s3"
	terminator = "aws4_request"
)

// Payload says how the body of a verified request is protected.
type Payload uint8

const (
	PayloadSHA256                   Payload = iota + 1 // x-amz-content-sha256 is the body's hex SHA-256, checked at EOF
	PayloadUnsigned                                    // UNSIGNED-PAYLOAD: the body is not covered by the signature
	PayloadStreamingSigned                             // aws-chunked, every chunk signed
	PayloadStreamingSignedTrailer                      // aws-chunked, every chunk and the trailers signed
	PayloadStreamingUnsignedTrailer                    // aws-chunked, nothing signed; trailers carry a checksum
)

// Credentials finds the secret of an access key and the user it belongs to.
// It must be safe for concurrent use and should not block: Verify calls it on
// every request.
type Credentials func(accessKey string) (secret, user string, ok bool)

// Verifier checks SigV4 signatures of S3 requests. Its fields are read only:
// a Verifier is safe for concurrent use once built, and must not be copied
// after its first use.
type Verifier struct {
	// Lookup resolves access keys. Required.
	Lookup Credentials
	// Region, if set, is the only region requests may be signed for (S3
	// answers AuthorizationHeaderMalformed naming the expected one). Empty
	// accepts whichever region the client signed with, as a single-site
	// store that ignores regions should.
	Region string
	// BucketOfHost, if set, names the bucket a virtual-hosted request
	// addresses by its Host ("" for a path-style one): a SigV2 presigned
	// URL signs the bucket in its resource (v2presign.go).
	BucketOfHost func(host string) string
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	keys keyCache // derived signing keys; a Verifier must not be copied once used
}

// keyCache keeps the signing keys derived for (secret, date, region): a key
// changes once a day, and deriving it costs four of the five HMACs of a
// request's check. It holds at most maxCachedKeys and starts afresh when
// full.
type keyCache struct {
	mu   sync.Mutex
	keys map[string][]byte
}

const maxCachedKeys = 4096

func (c *keyCache) get(secret, date, region string) []byte {
	id := secret + "\x00" + date + "\x00" + region
	c.mu.Lock()
	k, ok := c.keys[id]
	c.mu.Unlock()
	if ok {
		return k
	}
	k = signingKey(secret, date, region)
	c.mu.Lock()
	if c.keys == nil || len(c.keys) >= maxCachedKeys {
		c.keys = make(map[string][]byte)
	}
	c.keys[id] = k
	c.mu.Unlock()
	return k
}

// Auth is a verified request: who signed it and its body.
type Auth struct {
	AccessKey string
	User      string
	Region    string    // the region of the credential scope
	Time      time.Time // the request's signing time (X-Amz-Date)
	Presigned bool      // signed in the query string
	Anonymous bool      // no signature at all: User is empty and Body is the raw body
	Payload   Payload

	// Body is the payload to read instead of r.Body. For aws-chunked
	// requests it is the decoded data. Bytes are handed out as they arrive,
	// before what protects them is checked: the body is authentic only once
	// Body returned io.EOF, and any other error means it must be discarded.
	// A plain signed body's SHA-256 is compared at EOF; each aws-chunked
	// chunk's signature when its last byte has been read.
	Body io.Reader

	// Chunked reports an aws-chunked body, which Body decodes: the three
	// STREAMING payloads, and UNSIGNED-PAYLOAD with Content-Encoding
	// aws-chunked and x-amz-decoded-content-length. The gateway must then
	// drop aws-chunked from the Content-Encoding it stores.
	Chunked bool

	// DecodedLength is x-amz-decoded-content-length for aws-chunked bodies
	// (Body fails with IncompleteBody unless it yields exactly that many
	// bytes), or -1 when absent or not aws-chunked.
	DecodedLength int64

	// DeclaredTrailers are the lower-case names in x-amz-trailer: the
	// trailers an aws-chunked body must end with.
	DeclaredTrailers []string

	chunked *chunkReader
}

// Trailer returns the trailers of an aws-chunked body (keys in canonical
// form, e.g. "X-Amz-Checksum-Crc32"), once Body has returned io.EOF; nil
// before that, for other bodies, and when there were none. For
// PayloadStreamingSignedTrailer their signature has been checked; the
// x-amz-trailer-signature itself is not among them.
func (a *Auth) Trailer() http.Header {
	if a.chunked == nil || a.chunked.err != io.EOF {
		return nil
	}
	return a.chunked.trailer
}

// Verify checks the signature of r, in its Authorization header or its
// query string (presigned URL), and returns who signed it and the body to
// read. A request with neither returns an Auth with Anonymous set; the caller
// decides what anonymous requests may do. Every error is an *Error.
func (v *Verifier) Verify(r *http.Request) (*Auth, error) {
	authz := r.Header.Values("Authorization")
	if len(r.URL.RawQuery) > MaxQueryBytes {
		return nil, ErrInvalidURI.with("The query string is too long.")
	}
	query, err := parseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, err
	}
	presigned := query.has("X-Amz-Algorithm") || query.has("X-Amz-Credential") || query.has("X-Amz-Signature")
	switch {
	case len(authz) > 0 && presigned:
		return nil, ErrInvalidArgument.with("Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, Signature query string parameter or the Authorization header should be specified")
	case len(authz) > 0:
		return v.verifyHeader(r, authz, query)
	case presigned:
		return v.verifyPresigned(r, query)
	case query.has("Signature") || query.has("AWSAccessKeyId"):
		return v.verifyPresignedV2(r, query)
	}
	body := io.Reader(r.Body)
	if r.Body == nil {
		body = http.NoBody
	}
	return &Auth{Anonymous: true, Payload: PayloadUnsigned, Body: body, DecodedLength: -1}, nil
}

func (v *Verifier) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

// signed is what a request's signature covers, parsed and checked for form.
type signed struct {
	scope     scope
	headers   []string // SignedHeaders, lower case, in the client's order
	signature [32]byte
	amzDate   string // the request time as signed, ISO 8601 basic
	time      time.Time
	payload   string // x-amz-content-sha256 as signed
}

// scope is a parsed credential: AKID/20130524/us-east-1/s3/aws4_request.
type scope struct {
	accessKey, date, region string
}

func (s scope) String() string { return s.date + "/" + s.region + "/" + service + "/" + terminator }

func (v *Verifier) verifyHeader(r *http.Request, authz []string, query params) (*Auth, error) {
	malformed := ErrAuthorizationHeaderMalformed
	if len(authz) != 1 {
		return nil, malformed.with("The authorization header is malformed; more than one Authorization header.")
	}
	s, err := parseAuthorization(authz[0])
	if err != nil {
		return nil, err
	}
	// The request time: x-amz-date, else Date.
	if d := r.Header.Values("X-Amz-Date"); len(d) > 0 {
		t, err := time.Parse(iso8601, d[0])
		if len(d) != 1 || err != nil {
			return nil, ErrAccessDenied.with("AWS authentication requires a valid Date or x-amz-date header")
		}
		s.amzDate, s.time = d[0], t
	} else if d := r.Header.Values("Date"); len(d) == 1 {
		t, err := http.ParseTime(d[0])
		if err != nil {
			return nil, ErrAccessDenied.with("AWS authentication requires a valid Date or x-amz-date header")
		}
		s.time = t.UTC()
		s.amzDate = s.time.Format(iso8601)
	} else {
		return nil, ErrAccessDenied.with("AWS authentication requires a valid Date or x-amz-date header")
	}
	if len(r.Header.Values("X-Amz-Date")) == 0 && !contains(s.headers, "date") {
		return nil, ErrAccessDenied.with("The Date header must be signed")
	}
	if err := v.checkScope(s.scope, s.amzDate, malformed, "The authorization header is malformed; "); err != nil {
		return nil, err
	}
	p := r.Header.Values("X-Amz-Content-Sha256")
	if len(p) == 0 {
		return nil, ErrInvalidRequest.with("Missing required header for this request: x-amz-content-sha256")
	}
	if len(p) != 1 {
		return nil, ErrInvalidArgument.with("x-amz-content-sha256 appears more than once")
	}
	s.payload = p[0]
	if _, err := payloadMode(s.payload); err != nil {
		return nil, err
	}
	if skew := v.now().Sub(s.time); skew > MaxSkew || skew < -MaxSkew {
		return nil, ErrRequestTimeTooSkewed
	}
	return v.finish(r, s, query, false)
}

func (v *Verifier) verifyPresigned(r *http.Request, query params) (*Auth, error) {
	bad := ErrAuthorizationQueryParameters
	get := func(name string) (string, bool) {
		vals := query.get(name)
		if len(vals) != 1 {
			return "", false
		}
		return vals[0], true
	}
	alg, ok1 := get("X-Amz-Algorithm")
	cred, ok2 := get("X-Amz-Credential")
	date, ok3 := get("X-Amz-Date")
	exp, ok4 := get("X-Amz-Expires")
	hdrs, ok5 := get("X-Amz-SignedHeaders")
	sig, ok6 := get("X-Amz-Signature")
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) {
		return nil, bad.with("Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters.")
	}
	if alg != algorithm {
		return nil, bad.with("X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\"")
	}
	var s signed
	var err error
	if s.scope, err = parseCredential(cred, bad, "Error parsing the X-Amz-Credential parameter; "); err != nil {
		return nil, err
	}
	if s.headers, err = parseSignedHeaders(hdrs, bad, "Error parsing the X-Amz-SignedHeaders parameter; "); err != nil {
		return nil, err
	}
	if s.signature, err = parseSignature(sig, bad, "Error parsing the X-Amz-Signature parameter; "); err != nil {
		return nil, err
	}
	t, err := time.Parse(iso8601, date)
	if err != nil {
		return nil, bad.with("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"")
	}
	s.amzDate, s.time = date, t
	secs, err := strconv.ParseInt(exp, 10, 64)
	switch {
	case err != nil || len(exp) > 7:
		return nil, bad.with("X-Amz-Expires should be a number")
	case secs < 0:
		return nil, bad.with("X-Amz-Expires must be non-negative")
	case secs > int64(MaxPresignExpiry/time.Second):
		return nil, bad.with("X-Amz-Expires must be less than a week (in seconds) that is 604800")
	}
	if err := v.checkScope(s.scope, s.amzDate, bad, "Error parsing the X-Amz-Credential parameter; "); err != nil {
		return nil, err
	}
	s.payload = UnsignedPayload
	if p := r.Header.Values("X-Amz-Content-Sha256"); len(p) > 0 {
		if len(p) != 1 {
			return nil, ErrInvalidArgument.with("x-amz-content-sha256 appears more than once")
		}
		if _, err := payloadMode(p[0]); err != nil {
			return nil, err
		}
		s.payload = p[0]
	}
	now := v.now()
	if now.Before(s.time.Add(-MaxSkew)) {
		return nil, ErrAccessDenied.with("Request is not valid yet")
	}
	if now.After(s.time.Add(time.Duration(secs) * time.Second)) {
		return nil, ErrExpired
	}
	return v.finish(r, s, query, true)
}

// checkScope checks the credential scope against the request time and the
// configured region.
func (v *Verifier) checkScope(s scope, amzDate string, bad *Error, prefix string) error {
	if s.date != amzDate[:8] {
		return bad.with(prefix + "Invalid credential date \"" + s.date + "\". This date is not the same as X-Amz-Date: \"" + amzDate[:8] + "\".")
	}
	if v.Region != "" && s.region != v.Region {
		return bad.with(prefix + "the region '" + s.region + "' is wrong; expecting '" + v.Region + "'")
	}
	return nil
}

// finish looks the key up, checks the signature and builds the body reader.
func (v *Verifier) finish(r *http.Request, s signed, query params, presigned bool) (*Auth, error) {
	mode, _ := payloadMode(s.payload) // checked by the callers
	if err := checkSignedHeaders(r, s); err != nil {
		return nil, err
	}
	path := r.URL.Path
	raw := rawPath(r)
	if len(path) > MaxPathBytes || len(raw) > MaxPathBytes {
		return nil, ErrInvalidURI.with("The request path is too long.")
	}
	secret, user, ok := v.Lookup(s.scope.accessKey)
	if !ok {
		return nil, ErrInvalidAccessKeyID
	}
	key := v.keys.get(secret, s.scope.date, s.scope.region)
	scopeStr := s.scope.String()
	if !signatureMatches(r, path, raw, canonicalQuery(query, presigned), s, key, scopeStr) {
		return nil, ErrSignatureDoesNotMatch
	}
	a := &Auth{
		AccessKey:     s.scope.accessKey,
		User:          user,
		Region:        s.scope.region,
		Time:          s.time,
		Presigned:     presigned,
		Payload:       mode,
		DecodedLength: -1,
	}
	if err := a.setBody(r, mode, s, key, scopeStr); err != nil {
		return nil, err
	}
	return a, nil
}

// checkSignedHeaders requires the host and every x-amz-* header sent to be
// signed, as S3 does: an unsigned one (x-amz-copy-source, x-amz-meta-*,
// x-amz-content-sha256, ...) could have been added or changed by anyone on
// the way.
func checkSignedHeaders(r *http.Request, s signed) error {
	if !contains(s.headers, "host") {
		return ErrAccessDenied.with("The host header must be signed")
	}
	for name := range r.Header {
		if len(name) > 6 && strings.EqualFold(name[:6], "x-amz-") && !contains(s.headers, strings.ToLower(name)) {
			return ErrAccessDenied.with("There were headers present in the request which were not signed: " + strings.ToLower(name))
		}
	}
	return nil
}

// signatureMatches computes the request's signature and compares it. S3
// encodes the decoded path once; a client that signed the path exactly as
// it sent it (with characters escaped another way, or an escaped '/') is
// accepted too: both name the same key.
func signatureMatches(r *http.Request, path, raw, canonQuery string, s signed, key []byte, scopeStr string) bool {
	uris := []string{canonicalURI(path)}
	if raw != uris[0] {
		uris = append(uris, raw)
	}
	for _, uri := range uris {
		cr := canonicalRequest(r, uri, canonQuery, s.headers, s.payload)
		sig := signature(key, stringToSign(s.amzDate, scopeStr, cr))
		if hmac.Equal(sig[:], s.signature[:]) {
			return true
		}
	}
	return false
}

// setBody gives a the reader of the request's body that checks what the
// payload mode promises as the body streams.
func (a *Auth) setBody(r *http.Request, mode Payload, s signed, key []byte, scopeStr string) error {
	body := io.Reader(r.Body)
	if r.Body == nil {
		body = http.NoBody
	}
	switch mode {
	case PayloadUnsigned:
		a.Body = body
		// Some SDKs (Java v2's among them) send an unsigned aws-chunked
		// body under UNSIGNED-PAYLOAD; Content-Encoding and
		// x-amz-decoded-content-length say so, and S3 decodes it.
		if httpTokens(r.Header.Values("Content-Encoding"), "aws-chunked") && len(r.Header.Values("X-Amz-Decoded-Content-Length")) > 0 {
			if err := a.chunkedHeaders(r); err != nil {
				return err
			}
			c := newChunkReader(body, PayloadStreamingUnsignedTrailer, a.DecodedLength, a.DeclaredTrailers)
			a.chunked, a.Body, a.Chunked = c, c, true
		}
	case PayloadSHA256:
		var want [32]byte
		hex.Decode(want[:], []byte(s.payload)) // checked by payloadMode
		a.Body = &sha256Reader{r: incomplete{body}, h: sha256.New(), want: want}
	default:
		if err := a.chunkedHeaders(r); err != nil {
			return err
		}
		c := newChunkReader(body, mode, a.DecodedLength, a.DeclaredTrailers)
		if mode != PayloadStreamingUnsignedTrailer {
			c.sign(key, s.amzDate, scopeStr, s.signature)
		}
		a.chunked, a.Body, a.Chunked = c, c, true
	}
	return nil
}

// chunkedHeaders reads x-amz-decoded-content-length and x-amz-trailer.
func (a *Auth) chunkedHeaders(r *http.Request) error {
	if d := r.Header.Values("X-Amz-Decoded-Content-Length"); len(d) > 0 {
		n, err := strconv.ParseInt(d[0], 10, 64)
		if len(d) != 1 || err != nil || n < 0 || n > maxDecodedLength {
			return ErrInvalidArgument.with("x-amz-decoded-content-length is not a valid length")
		}
		a.DecodedLength = n
	}
	for _, v := range r.Header.Values("X-Amz-Trailer") {
		for name := range strings.SplitSeq(v, ",") {
			name = strings.ToLower(strings.TrimSpace(name))
			if name == "" {
				continue
			}
			if len(a.DeclaredTrailers) == MaxTrailers || !isToken(name) || contains(a.DeclaredTrailers, name) {
				return ErrInvalidArgument.with("x-amz-trailer is not a valid list of trailers")
			}
			a.DeclaredTrailers = append(a.DeclaredTrailers, name)
		}
	}
	return nil
}

// payloadMode classifies an x-amz-content-sha256 value.
func payloadMode(p string) (Payload, error) {
	switch p {
	case UnsignedPayload:
		return PayloadUnsigned, nil
	case StreamingSigned:
		return PayloadStreamingSigned, nil
	case StreamingSignedTrailer:
		return PayloadStreamingSignedTrailer, nil
	case StreamingUnsignedTrailer:
		return PayloadStreamingUnsignedTrailer, nil
	}
	if len(p) == 64 && isHex(p) {
		return PayloadSHA256, nil
	}
	if strings.HasPrefix(p, "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD") {
		return 0, ErrInvalidRequest.with("The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.")
	}
	return 0, ErrInvalidArgument.with("x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, STREAMING-AWS4-HMAC-SHA256-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER or a valid sha256 value.")
}

// parseAuthorization parses
// "AWS4-HMAC-SHA256 Credential=AK/date/region/s3/aws4_request, SignedHeaders=a;b, Signature=hex".
func parseAuthorization(h string) (signed, error) {
	bad := ErrAuthorizationHeaderMalformed
	const prefix = "The authorization header is malformed; "
	var s signed
	if len(h) > MaxAuthBytes {
		return s, bad.with(prefix + "it is too long.")
	}
	alg, rest, _ := strings.Cut(h, " ")
	if alg != algorithm {
		if alg == "AWS" || strings.HasPrefix(alg, "AWS4-") {
			return s, ErrInvalidRequest.with("The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.")
		}
		return s, bad.with(prefix + "the authorization mechanism is not AWS4-HMAC-SHA256.")
	}
	var cred, hdrs, sig string
	var seen [3]bool
	for part := range strings.SplitSeq(rest, ",") {
		k, val, ok := strings.Cut(strings.Trim(part, " "), "=")
		i := -1
		switch k {
		case "Credential":
			i, cred = 0, val
		case "SignedHeaders":
			i, hdrs = 1, val
		case "Signature":
			i, sig = 2, val
		}
		if !ok || i < 0 || seen[i] {
			return s, bad.with(prefix + "expected Credential=, SignedHeaders= and Signature=, each once, separated by commas.")
		}
		seen[i] = true
	}
	if !seen[0] || !seen[1] || !seen[2] {
		return s, bad.with(prefix + "it lacks Credential, SignedHeaders or Signature.")
	}
	var err error
	if s.scope, err = parseCredential(cred, bad, prefix); err != nil {
		return s, err
	}
	if s.headers, err = parseSignedHeaders(hdrs, bad, prefix); err != nil {
		return s, err
	}
	if s.signature, err = parseSignature(sig, bad, prefix); err != nil {
		return s, err
	}
	return s, nil
}

func parseCredential(c string, bad *Error, prefix string) (scope, error) {
	parts := strings.Split(c, "/")
	if len(parts) != 5 {
		return scope{}, bad.with(prefix + "a non-empty Access Key (AKID) must be provided in the credential.")
	}
	s := scope{accessKey: parts[0], date: parts[1], region: parts[2]}
	switch {
	case s.accessKey == "" || len(s.accessKey) > 128:
		return scope{}, bad.with(prefix + "a non-empty Access Key (AKID) must be provided in the credential.")
	case len(s.date) != 8 || !isDigits(s.date):
		return scope{}, bad.with(prefix + "incorrect date format \"" + s.date + "\". This date in the credential must be in the format \"yyyyMMdd\".")
	case s.region == "" || len(s.region) > 64 || !isToken(s.region):
		return scope{}, bad.with(prefix + "the region is not valid.")
	case parts[3] != service:
		return scope{}, bad.with(prefix + "incorrect service \"" + parts[3] + "\". This endpoint belongs to \"s3\".")
	case parts[4] != terminator:
		return scope{}, bad.with(prefix + "incorrect terminal \"" + parts[4] + "\". This endpoint uses \"aws4_request\".")
	}
	return s, nil
}

func parseSignedHeaders(h string, bad *Error, prefix string) ([]string, error) {
	if h == "" {
		return nil, bad.with(prefix + "SignedHeaders is empty.")
	}
	n := strings.Count(h, ";") + 1
	if n > MaxSignedHeaders {
		return nil, bad.with(prefix + "too many signed headers.")
	}
	out := make([]string, 0, n)
	for name := range strings.SplitSeq(h, ";") {
		if name == "" || !isToken(name) || strings.ToLower(name) != name || contains(out, name) {
			return nil, bad.with(prefix + "SignedHeaders must list distinct lower-case header names separated by ';'.")
		}
		out = append(out, name)
	}
	return out, nil
}

func parseSignature(sig string, bad *Error, prefix string) ([32]byte, error) {
	var b [32]byte
	if len(sig) != 64 || !isHex(sig) {
		return b, bad.with(prefix + "the signature must be 64 hexadecimal digits.")
	}
	hex.Decode(b[:], []byte(sig))
	return b, nil
}

// sha256Reader passes a body through and compares its SHA-256 at EOF.
type sha256Reader struct {
	r    io.Reader
	h    hash.Hash
	want [32]byte
	err  error
}

func (s *sha256Reader) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.r.Read(p)
	s.h.Write(p[:n])
	if err == io.EOF {
		var got [32]byte
		s.h.Sum(got[:0])
		if got != s.want {
			err = ErrContentSHA256Mismatch
		}
	}
	if err != nil {
		s.err = err
	}
	return n, err
}

// httpTokens reports whether a comma-separated header holds token.
func httpTokens(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isToken reports whether s is an HTTP token (RFC 9110): what a header name
// may be made of.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return s != ""
}
