package sigv4

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// param is one query parameter, decoded ('+' is a space, as every SDK
// encodes one in a presigned URL's query).
type param struct{ key, value string }

type params []param

func (ps params) has(key string) bool {
	for _, p := range ps {
		if p.key == key {
			return true
		}
	}
	return false
}

func (ps params) get(key string) []string {
	var out []string
	for _, p := range ps {
		if p.key == key {
			out = append(out, p.value)
		}
	}
	return out
}

// parseQuery splits a raw query string into its decoded parameters, in
// order, duplicates kept. A parameter without '=' has the empty value.
func parseQuery(raw string) (params, error) {
	if raw == "" {
		return nil, nil
	}
	if strings.Count(raw, "&") >= MaxQueryParams {
		return nil, ErrInvalidURI.with("The query string has too many parameters.")
	}
	var ps params
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		key, err1 := url.QueryUnescape(k)
		value, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil {
			return nil, ErrInvalidURI
		}
		ps = append(ps, param{key, value})
	}
	return ps, nil
}

// canonicalQuery is the CanonicalQueryString: every parameter's name and
// value URI-encoded, sorted by encoded name then encoded value, joined by
// '&'. A presigned request's X-Amz-Signature is left out.
func canonicalQuery(ps params, presigned bool) string {
	enc := make([]param, 0, len(ps))
	for _, p := range ps {
		if presigned && p.key == "X-Amz-Signature" {
			continue
		}
		enc = append(enc, param{uriEncode(p.key, false), uriEncode(p.value, false)})
	}
	slices.SortFunc(enc, func(a, b param) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return strings.Compare(a.value, b.value)
	})
	var b strings.Builder
	for i, p := range enc {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(p.key)
		b.WriteByte('=')
		b.WriteString(p.value)
	}
	return b.String()
}

// canonicalURI is the CanonicalURI of S3: the decoded path URI-encoded once
// ('/' kept). S3, unlike other services, does not encode it twice.
func canonicalURI(path string) string {
	if path == "" {
		return "/"
	}
	return uriEncode(path, true)
}

// rawPath is the path exactly as the client sent it, escapes and all.
func rawPath(r *http.Request) string {
	p := r.RequestURI
	if p == "" {
		p = r.URL.EscapedPath()
	} else {
		if i := strings.IndexByte(p, '?'); i >= 0 {
			p = p[:i]
		}
		if rest, ok := strings.CutPrefix(p, "http://"); ok {
			p = rest[strings.IndexByte(rest+"/", '/'):]
		} else if rest, ok := strings.CutPrefix(p, "https://"); ok {
			p = rest[strings.IndexByte(rest+"/", '/'):]
		}
	}
	if p == "" {
		return "/"
	}
	return p
}

// uriEncode percent-encodes every byte but the unreserved characters of
// RFC 3986 (A-Z a-z 0-9 - . _ ~), and '/' if keepSlash, with upper-case hex.
func uriEncode(s string, keepSlash bool) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if !unreserved(s[i]) && !(keepSlash && s[i] == '/') {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hexUpper = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if unreserved(c) || keepSlash && c == '/' {
			b = append(b, c)
		} else {
			b = append(b, '%', hexUpper[c>>4], hexUpper[c&15])
		}
	}
	return string(b)
}

func unreserved(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// canonicalRequest builds
//
//	Method \n CanonicalURI \n CanonicalQuery \n CanonicalHeaders \n SignedHeaders \n Payload
//
// where CanonicalHeaders has one "name:value\n" per signed header, the value
// being its values, each trimmed and with runs of spaces made one, joined by
// ','.
func canonicalRequest(r *http.Request, uri, query string, signedHeaders []string, payload string) []byte {
	b := make([]byte, 0, 512)
	b = append(b, r.Method...)
	b = append(b, '\n')
	b = append(b, uri...)
	b = append(b, '\n')
	b = append(b, query...)
	b = append(b, '\n')
	for _, name := range signedHeaders {
		b = append(b, name...)
		b = append(b, ':')
		for i, v := range headerValues(r, name) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendTrimmed(b, v)
		}
		b = append(b, '\n')
	}
	b = append(b, '\n')
	for i, name := range signedHeaders {
		if i > 0 {
			b = append(b, ';')
		}
		b = append(b, name...)
	}
	b = append(b, '\n')
	b = append(b, payload...)
	return b
}

// headerValues returns the values of a signed header. net/http moves Host,
// and for a server request Transfer-Encoding, out of the header map.
func headerValues(r *http.Request, name string) []string {
	switch name {
	case "host":
		if r.Host != "" {
			return []string{r.Host}
		}
		return []string{r.URL.Host}
	case "content-length":
		if v := r.Header.Values("Content-Length"); len(v) > 0 {
			return v
		}
		if r.ContentLength > 0 {
			return []string{strconv.FormatInt(r.ContentLength, 10)}
		}
		return nil
	case "transfer-encoding":
		if v := r.Header.Values("Transfer-Encoding"); len(v) > 0 {
			return v
		}
		return []string{strings.Join(r.TransferEncoding, ",")}
	}
	return r.Header.Values(name)
}

// appendTrimmed appends v without leading and trailing spaces and tabs,
// with each run of spaces made one.
func appendTrimmed(b []byte, v string) []byte {
	v = strings.Trim(v, " \t")
	space := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == ' ' {
			if space {
				continue
			}
			space = true
		} else {
			space = false
		}
		b = append(b, c)
	}
	return b
}

// stringToSign is "AWS4-HMAC-SHA256\n" date "\n" scope "\n" hex(sha256(canonical request)).
func stringToSign(amzDate, scope string, canonical []byte) []byte {
	sum := sha256.Sum256(canonical)
	b := make([]byte, 0, len(algorithm)+len(amzDate)+len(scope)+3+64)
	b = append(b, algorithm...)
	b = append(b, '\n')
	b = append(b, amzDate...)
	b = append(b, '\n')
	b = append(b, scope...)
	b = append(b, '\n')
	return hex.AppendEncode(b, sum[:])
}

// signingKey derives the key of a day, region and service from the secret.
func signingKey(secret, date, region string) []byte {
	k := hmacSHA256([]byte("AWS4"+secret), []byte(date))
	k = hmacSHA256(k, []byte(region))
	k = hmacSHA256(k, []byte(service))
	return hmacSHA256(k, []byte(terminator))
}

func signature(key, stringToSign []byte) [32]byte {
	var s [32]byte
	copy(s[:], hmacSHA256(key, stringToSign))
	return s
}

func hmacSHA256(key, data []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(data)
	return m.Sum(nil)
}
