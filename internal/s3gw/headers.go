package s3gw

import (
	"net/http"
	"sort"
	"strings"
)

// objectHeaders reads what a PUT (or CopyObject with REPLACE, or
// CreateMultipartUpload) stores with an object: the standard headers and
// the user metadata, at most maxMetaBytes of names and values as S3
// counts them. aws-chunked is the body's transfer coding, not the
// object's, so it is dropped from Content-Encoding.
func objectHeaders(h http.Header) (StdHeaders, []MetaKV, error) {
	std := StdHeaders{
		ContentType:        h.Get("Content-Type"),
		CacheControl:       h.Get("Cache-Control"),
		ContentDisposition: h.Get("Content-Disposition"),
		ContentEncoding:    dropAWSChunked(h.Get("Content-Encoding")),
		ContentLanguage:    h.Get("Content-Language"),
		Expires:            h.Get("Expires"),
	}
	var meta []MetaKV
	size := 0
	for name, vals := range h {
		lower := strings.ToLower(name)
		rest, ok := strings.CutPrefix(lower, "x-amz-meta-")
		if !ok {
			continue
		}
		v := strings.Join(vals, ",")
		size += len(rest) + len(v)
		meta = append(meta, MetaKV{rest, v})
	}
	if size > maxMetaBytes {
		return std, nil, ErrMetadataTooLarge.with("Your metadata headers are %d bytes; the limit is %d.", size, maxMetaBytes)
	}
	sort.Slice(meta, func(i, j int) bool { return meta[i].Name < meta[j].Name })
	return std, meta, nil
}

func dropAWSChunked(ce string) string {
	if !strings.Contains(ce, "aws-chunked") {
		return ce
	}
	var keep []string
	for _, c := range strings.Split(ce, ",") {
		if c = strings.TrimSpace(c); c != "" && c != "aws-chunked" {
			keep = append(keep, c)
		}
	}
	return strings.Join(keep, ",")
}

// setObjectHeaders writes an object's stored headers into a GET or HEAD
// answer.
func setObjectHeaders(h http.Header, e *Entry) {
	set := func(k, v string) {
		if v != "" {
			h.Set(k, v)
		}
	}
	ct := e.Headers.ContentType
	if ct == "" {
		ct = "binary/octet-stream"
	}
	h.Set("Content-Type", ct)
	set("Cache-Control", e.Headers.CacheControl)
	set("Content-Disposition", e.Headers.ContentDisposition)
	set("Content-Encoding", e.Headers.ContentEncoding)
	set("Content-Language", e.Headers.ContentLanguage)
	set("Expires", e.Headers.Expires)
	for _, m := range e.Meta {
		h["X-Amz-Meta-"+m.Name] = []string{m.Value}
	}
	h.Set("ETag", `"`+e.ETag+`"`)
	h.Set("Last-Modified", e.MTime.UTC().Format(http.TimeFormat))
	h.Set("Accept-Ranges", "bytes")
}
