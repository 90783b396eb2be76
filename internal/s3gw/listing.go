package s3gw

import (
	"encoding/base64"
	"encoding/xml"
	"net/http"
	"strconv"
	"strings"
)

// listParams are the parameters of ListObjects (V1) and ListObjectsV2.
type listParams struct {
	v2         bool
	prefix     string
	delimiter  string
	maxKeys    int
	after      string // the listing starts after this position
	startAfter string // as sent (V2 start-after, V1 marker)
	token      string // V2 continuation-token as sent
	encodeURL  bool
	fetchOwner bool
}

// maxListKeys is S3's largest page.
const maxListKeys = 1000

// afterMarker is past every key under a common prefix: 0xFF never occurs
// in UTF-8, and keys are UTF-8.
const afterMarker = "\xff"

// parseList reads a listing's query parameters (fuzzed through the
// token and marker decoders).
func parseList(q map[string][]string, v2 bool) (listParams, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	p := listParams{v2: v2, prefix: get("prefix"), delimiter: get("delimiter"), maxKeys: maxListKeys}
	if len(p.prefix) > maxKeyBytes || len(p.delimiter) > maxKeyBytes {
		return p, ErrInvalidArgument.with("prefix and delimiter are at most %d bytes.", maxKeyBytes)
	}
	if v := get("max-keys"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return p, ErrInvalidArgument.with("max-keys must be a non-negative integer.")
		}
		p.maxKeys = min(n, maxListKeys)
	}
	switch e := get("encoding-type"); e {
	case "":
	case "url":
		p.encodeURL = true
	default:
		return p, ErrInvalidArgument.with("Invalid Encoding Method specified in Request")
	}
	p.fetchOwner = get("fetch-owner") == "true"
	if v2 {
		p.startAfter = get("start-after")
		p.token = get("continuation-token")
	} else {
		p.startAfter = get("marker")
	}
	if len(p.startAfter) > maxKeyBytes {
		return p, ErrInvalidArgument.with("start-after and marker are at most %d bytes.", maxKeyBytes)
	}
	p.after = skipPrefixMarker(p.startAfter, p.prefix, p.delimiter)
	if q["continuation-token"] != nil {
		after, err := decodeToken(p.token)
		if err != nil {
			return p, err
		}
		p.after = max(p.after, after)
	}
	return p, nil
}

// skipPrefixMarker returns where a listing after marker starts: a marker
// that is itself a common prefix (as NextMarker is when a page ended on
// one) skips every key under it, so the prefix is not listed twice.
func skipPrefixMarker(marker, prefix, delim string) string {
	if delim == "" || !strings.HasPrefix(marker, prefix) || !strings.HasSuffix(marker, delim) {
		return marker
	}
	rest := marker[len(prefix):]
	if i := strings.Index(rest, delim); i >= 0 && i == len(rest)-len(delim) {
		return marker + afterMarker
	}
	return marker
}

func encodeToken(after string) string { return base64.RawURLEncoding.EncodeToString([]byte(after)) }

func decodeToken(t string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(t)
	if err != nil || t == "" || len(b) > maxKeyBytes+len(afterMarker) {
		return "", ErrInvalidArgument.with("The continuation token provided is incorrect")
	}
	return string(b), nil
}

type listObjectsResult struct {
	XMLName               xml.Name    `xml:"ListBucketResult"`
	NS                    string      `xml:"xmlns,attr"`
	Name                  string      `xml:"Name"`
	Prefix                string      `xml:"Prefix"`
	Marker                *string     `xml:"Marker"`
	NextMarker            string      `xml:"NextMarker,omitempty"`
	StartAfter            string      `xml:"StartAfter,omitempty"`
	ContinuationToken     string      `xml:"ContinuationToken,omitempty"`
	NextContinuationToken string      `xml:"NextContinuationToken,omitempty"`
	KeyCount              *int        `xml:"KeyCount"`
	MaxKeys               int         `xml:"MaxKeys"`
	Delimiter             string      `xml:"Delimiter,omitempty"`
	EncodingType          string      `xml:"EncodingType,omitempty"`
	IsTruncated           bool        `xml:"IsTruncated"`
	Contents              []objectXML `xml:"Contents"`
	CommonPrefixes        []prefixXML `xml:"CommonPrefixes"`
}

type objectXML struct {
	Key               string `xml:"Key"`
	LastModified      string `xml:"LastModified"`
	ETag              string `xml:"ETag"`
	ChecksumAlgorithm string `xml:"ChecksumAlgorithm,omitempty"`
	ChecksumType      string `xml:"ChecksumType,omitempty"`
	Size              uint64 `xml:"Size"`
	Owner             *owner `xml:"Owner"`
	StorageClass      string `xml:"StorageClass"`
}

type prefixXML struct {
	Prefix string `xml:"Prefix"`
}

// listPage is one page of a listing, decoded from the index.
type listPage struct {
	keys      []string
	entries   []*Entry
	prefixes  []string
	truncated bool
	next      string // where the next page starts (after this)
	lastItem  string // the page's last key or prefix (V1 NextMarker)
}

// listIndex reads one page from the bucket's index: from the shard where
// it starts (and the next, when that one ends first), common prefixes
// skipped whole by the OSD (listAcross).
func (rq *request) listIndex(b *bucketRec, p listParams) (listPage, error) {
	var page listPage
	if p.maxKeys == 0 {
		return page, nil
	}
	l, err := rq.g.listAcross(rq.ctx, b, acrossQuery{prefix: p.prefix, delim: p.delimiter, after: p.after, limit: p.maxKeys,
		keyOf: func(k string) string { return k }})
	if err != nil {
		return page, err
	}
	// Merge entries and prefixes in key order to find the last item.
	for _, kv := range l.Entries {
		e, err := decodeEntry(kv.Value)
		if err != nil {
			return page, err
		}
		page.keys = append(page.keys, kv.Key)
		page.entries = append(page.entries, e)
		page.lastItem, page.next = max(page.lastItem, kv.Key), max(page.next, kv.Key)
	}
	for _, cp := range l.Prefixes {
		page.prefixes = append(page.prefixes, cp)
		page.lastItem = max(page.lastItem, cp)
		page.next = max(page.next, cp+afterMarker)
	}
	page.truncated = l.More
	return page, nil
}

func (rq *request) listObjects(v2 bool) error {
	b, err := rq.ownBucket()
	if err != nil {
		return err
	}
	p, err := parseList(rq.query, v2)
	if err != nil {
		return err
	}
	page, err := rq.listIndex(b, p)
	if err != nil {
		return err
	}
	enc := func(s string) string { return s }
	if p.encodeURL {
		enc = s3URLEncode
	}
	res := listObjectsResult{NS: s3NS, Name: b.Name, Prefix: enc(p.prefix), MaxKeys: p.maxKeys,
		Delimiter: enc(p.delimiter), IsTruncated: page.truncated}
	if p.encodeURL {
		res.EncodingType = "url"
	}
	own := &owner{b.Owner, b.Owner}
	if v2 {
		n := len(page.keys) + len(page.prefixes)
		res.KeyCount = &n
		res.StartAfter = enc(p.startAfter)
		res.ContinuationToken = p.token
		if page.truncated {
			res.NextContinuationToken = encodeToken(page.next)
		}
		if !p.fetchOwner {
			own = nil
		}
	} else {
		m := enc(p.startAfter)
		res.Marker = &m
		if page.truncated {
			res.NextMarker = enc(page.lastItem)
		}
	}
	for i, k := range page.keys {
		e := page.entries[i]
		o := objectXML{Key: enc(k), LastModified: isoTime(e.MTime), ETag: `"` + e.ETag + `"`, Size: e.Size, Owner: own, StorageClass: "STANDARD"}
		if e.Checksum.Alg != 0 {
			o.ChecksumAlgorithm = e.Checksum.Alg.String()
			o.ChecksumType = "FULL_OBJECT"
			if e.Checksum.Parts > 0 {
				o.ChecksumType = "COMPOSITE"
			}
		}
		res.Contents = append(res.Contents, o)
	}
	for _, cp := range page.prefixes {
		res.CommonPrefixes = append(res.CommonPrefixes, prefixXML{enc(cp)})
	}
	return rq.writeXML(http.StatusOK, res)
}

// s3URLEncode encodes a key as S3's encoding-type=url does: every byte but
// the unreserved characters and '/' as %XX (a space as %20).
func s3URLEncode(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.~/", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
