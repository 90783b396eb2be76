package meta

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// S3Credentials is a gateway's copy of every S3 access key in memory, kept
// current by an etcd watch: Lookup costs one atomic load and a map read,
// never an etcd request. A key created or removed in etcd is found or
// refused within milliseconds while etcd is reachable. While it is not, the
// copy keeps its last state (as every process keeps its last map), and it
// catches up by reading every key again once etcd answers.
//
// The copy is revision-exact: the watch starts at the revision right after
// the read it follows, so no change falls between the two; a watch that
// breaks, or whose revisions etcd compacted away meanwhile, is replaced by
// a new read and a watch from there.
type S3Credentials struct {
	s      *Store
	keys   atomic.Pointer[map[string]s3Cred] // never changed once stored
	cancel context.CancelFunc
	done   chan struct{}

	reloads atomic.Int64 // reads of every key after the first
}

// s3Cred is what a gateway needs of an access key.
type s3Cred struct{ secret, user string }

// WatchS3Credentials reads every access key and follows their changes
// until ctx ends or Close is called. It fails if the first read does.
func (s *Store) WatchS3Credentials(ctx context.Context) (*S3Credentials, error) {
	keys, rev, err := s.loadS3Credentials(ctx)
	if err != nil {
		return nil, err
	}
	return s.followS3Credentials(ctx, keys, rev), nil
}

// followS3Credentials starts the watch of keys, as read at revision rev.
func (s *Store) followS3Credentials(ctx context.Context, keys map[string]s3Cred, rev int64) *S3Credentials {
	ctx, cancel := context.WithCancel(ctx)
	c := &S3Credentials{s: s, cancel: cancel, done: make(chan struct{})}
	c.keys.Store(&keys)
	go c.run(ctx, rev)
	return c
}

// Lookup returns the secret and the user of an access key; ok is false if
// no such key exists.
func (c *S3Credentials) Lookup(accessKey string) (secret, user string, ok bool) {
	cr, ok := (*c.keys.Load())[accessKey]
	return cr.secret, cr.user, ok
}

// Len returns how many access keys the copy holds.
func (c *S3Credentials) Len() int { return len(*c.keys.Load()) }

// Close stops following etcd; Lookup keeps answering from the last state.
func (c *S3Credentials) Close() {
	c.cancel()
	<-c.done
}

// loadS3Credentials reads every access key and the revision it read at.
func (s *Store) loadS3Credentials(ctx context.Context) (map[string]s3Cred, int64, error) {
	resp, err := s.cli.Get(ctx, prefixS3Keys, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("etcd: read the s3 access keys: %w", err)
	}
	keys := make(map[string]s3Cred, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		if cr, ok := decodeS3Cred(kv.Value); ok {
			keys[strings.TrimPrefix(string(kv.Key), prefixS3Keys)] = cr
		}
	}
	return keys, resp.Header.Revision, nil
}

// decodeS3Cred decodes a key's record; a damaged one counts as no key
// (refused, never guessed at).
func decodeS3Cred(b []byte) (s3Cred, bool) {
	var kr s3KeyRecord
	if json.Unmarshal(b, &kr) != nil || kr.Secret == "" || kr.User == "" {
		return s3Cred{}, false
	}
	return s3Cred{secret: kr.Secret, user: kr.User}, true
}

func (c *S3Credentials) run(ctx context.Context, rev int64) {
	defer close(c.done)
	var backoff time.Duration
	for {
		since := time.Now()
		c.follow(ctx, rev)
		// The watch ended: ctx is done, etcd compacted what it would
		// have sent next, or the stream broke. Read everything again and
		// watch from there; a failure that repeats at once is retried
		// ever more slowly, at least once a second.
		if time.Since(since) < time.Second {
			backoff = min(max(2*backoff, 50*time.Millisecond), time.Second)
		} else {
			backoff = 0
		}
		for {
			sleep(ctx, backoff)
			if ctx.Err() != nil {
				return
			}
			keys, r, err := c.s.loadS3Credentials(ctx)
			if err == nil {
				c.keys.Store(&keys)
				c.reloads.Add(1)
				rev = r
				break
			}
			backoff = min(max(2*backoff, 50*time.Millisecond), time.Second)
		}
	}
}

// follow applies the changes after revision rev until the watch ends.
func (c *S3Credentials) follow(ctx context.Context, rev int64) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the watch's stream
	for wr := range c.s.watch(ctx, prefixS3Keys, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if wr.Err() != nil {
			return
		}
		if len(wr.Events) == 0 {
			continue
		}
		next := maps.Clone(*c.keys.Load())
		for _, ev := range wr.Events {
			ak := strings.TrimPrefix(string(ev.Kv.Key), prefixS3Keys)
			cr, ok := decodeS3Cred(ev.Kv.Value)
			if ev.Type == clientv3.EventTypePut && ok {
				next[ak] = cr
			} else {
				delete(next, ak)
			}
		}
		c.keys.Store(&next)
	}
}
