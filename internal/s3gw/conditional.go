package s3gw

import (
	"net/http"
	"strings"
	"time"
)

// conditions are the conditional headers of a request (RFC 9110 as S3
// applies them): ETags without quotes, "*" for any.
type conditions struct {
	ifMatch, ifNoneMatch []string
	modifiedSince        time.Time // zero: absent or unparseable (ignored, as HTTP says)
	unmodifiedSince      time.Time
}

// maxETags bounds the ETags one conditional header may list.
const maxETags = 64

// parseConditions reads If-Match, If-None-Match, If-Modified-Since and
// If-Unmodified-Since, each under prefix ("" or "x-amz-copy-source-").
func parseConditions(h http.Header, prefix string) (conditions, error) {
	var c conditions
	var err error
	if c.ifMatch, err = etagList(h.Values(prefix + "If-Match")); err != nil {
		return c, err
	}
	if c.ifNoneMatch, err = etagList(h.Values(prefix + "If-None-Match")); err != nil {
		return c, err
	}
	c.modifiedSince = httpDate(h.Get(prefix + "If-Modified-Since"))
	c.unmodifiedSince = httpDate(h.Get(prefix + "If-Unmodified-Since"))
	return c, nil
}

func (c conditions) any() bool {
	return c.ifMatch != nil || c.ifNoneMatch != nil || !c.modifiedSince.IsZero() || !c.unmodifiedSince.IsZero()
}

func etagList(vals []string) ([]string, error) {
	var out []string
	for _, v := range vals {
		for _, t := range strings.Split(v, ",") {
			t = strings.TrimSpace(t)
			if t == "" {
				continue
			}
			t = strings.TrimPrefix(t, "W/")
			t = strings.Trim(t, `"`)
			if len(out) == maxETags || len(t) > 128 {
				return nil, ErrInvalidArgument.with("A conditional header lists too many or too long ETags.")
			}
			out = append(out, t)
		}
	}
	if vals != nil && out == nil {
		out = []string{}
	}
	return out, nil
}

func httpDate(v string) time.Time {
	if v == "" || len(v) > 64 {
		return time.Time{}
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return time.Time{}
	}
	return t
}

func matches(list []string, etag string) bool {
	for _, t := range list {
		if t == "*" || t == etag {
			return true
		}
	}
	return false
}

// evalRead applies the conditions to a GET or HEAD of an existing object:
// nil to serve it, ErrPreconditionFailed (412) or errNotModified (304). A
// matching If-Match overrides If-Unmodified-Since, a failing If-None-Match
// overrides If-Modified-Since, as S3 documents.
func (c conditions) evalRead(e *Entry) error {
	mtime := e.MTime.Truncate(time.Second)
	if c.ifMatch != nil {
		if !matches(c.ifMatch, e.ETag) {
			return ErrPreconditionFailed
		}
	} else if !c.unmodifiedSince.IsZero() && mtime.After(c.unmodifiedSince) {
		return ErrPreconditionFailed
	}
	if c.ifNoneMatch != nil {
		if matches(c.ifNoneMatch, e.ETag) {
			return errNotModified
		}
	} else if !c.modifiedSince.IsZero() && !mtime.After(c.modifiedSince) {
		return errNotModified
	}
	return nil
}

// evalWrite applies the conditions to a write over e (nil: no object):
// If-None-Match "*" is create-only; If-Match needs the object (NoSuchKey
// otherwise, as S3 answers); every failure is 412.
func (c conditions) evalWrite(e *Entry) error {
	if e == nil {
		if c.ifMatch != nil {
			return ErrNoSuchKey
		}
		return nil
	}
	mtime := e.MTime.Truncate(time.Second)
	switch {
	case c.ifMatch != nil && !matches(c.ifMatch, e.ETag),
		c.ifNoneMatch != nil && matches(c.ifNoneMatch, e.ETag),
		!c.unmodifiedSince.IsZero() && mtime.After(c.unmodifiedSince),
		!c.modifiedSince.IsZero() && !mtime.After(c.modifiedSince):
		return ErrPreconditionFailed
	}
	return nil
}
