package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/cairn-storage/cairn/internal/proto"
)

func (p *Pool) do(ctx context.Context, req *proto.Request) (*proto.Response, error) {
	if err := proto.ValidateObjectName(req.Object); err != nil {
		return nil, fmt.Errorf("%s/%q: %w: %v", p.name, req.Object, ErrInvalid, err)
	}
	req.SnapSeq = p.snapSeq
	if p.snap != 0 {
		if req.Op != proto.OpRead && req.Op != proto.OpStat {
			return nil, fmt.Errorf("%s %s/%s: %w: snapshot %d is read-only", req.Op, p.name, req.Object, ErrInvalid, p.snap)
		}
		req.Snap = p.snap
	}
	return p.c.call(ctx, p.id, p.name, nil, req)
}

// Put stores data as the whole content of the object, creating it or
// replacing what it held (xattrs and omap are kept). Objects larger than
// MaxChunk are written in pieces; each piece is durable when acknowledged.
func (p *Pool) Put(ctx context.Context, name string, data []byte) error {
	first := data
	if len(first) > MaxChunk {
		first = first[:MaxChunk]
	}
	if err := p.putWhole(ctx, name, first); err != nil {
		return err
	}
	for off := len(first); off < len(data); off += MaxChunk {
		end := min(off+MaxChunk, len(data))
		if err := p.WriteAt(ctx, name, uint64(off), data[off:end]); err != nil {
			return err
		}
	}
	return nil
}

// putWhole puts data, at most MaxChunk bytes, as the object's content:
// staged in an erasure-coded pool (staged.go), else in one request.
func (p *Pool) putWhole(ctx context.Context, name string, data []byte) error {
	if done, err := p.putStaged(ctx, name, data); done {
		return err
	}
	_, err := p.do(ctx, &proto.Request{Op: proto.OpPut, Object: name, Data: data})
	return err
}

// PutNew stores data as a new object; ErrExists if the object exists. It
// is one atomic step, so data is at most MaxChunk bytes.
func (p *Pool) PutNew(ctx context.Context, name string, data []byte) error {
	if len(data) > MaxChunk {
		return fmt.Errorf("put %s/%s: %w: %d bytes, more than the %d one request carries", p.name, name, ErrInvalid, len(data), MaxChunk)
	}
	_, err := p.do(ctx, &proto.Request{Op: proto.OpPut, Flags: proto.FlagExclusive, Object: name, Data: data})
	return err
}

// PutReader stores the content of r as the object (streamed in MaxChunk pieces).
func (p *Pool) PutReader(ctx context.Context, name string, r io.Reader) (int64, error) {
	buf := make([]byte, MaxChunk)
	var off int64
	for first := true; ; first = false {
		n, err := io.ReadFull(r, buf)
		if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
			return off, err
		}
		if first {
			if perr := p.putWhole(ctx, name, buf[:n]); perr != nil {
				return off, perr
			}
		} else if n > 0 {
			if werr := p.WriteAt(ctx, name, uint64(off), buf[:n]); werr != nil {
				return off, werr
			}
		}
		off += int64(n)
		if err != nil {
			return off, nil
		}
	}
}

// Create makes an empty object; with exclusive it fails with ErrExists if
// the object exists.
func (p *Pool) Create(ctx context.Context, name string, exclusive bool) error {
	req := &proto.Request{Op: proto.OpCreate, Object: name}
	if exclusive {
		req.Flags |= proto.FlagExclusive
	}
	_, err := p.do(ctx, req)
	return err
}

// WriteAt writes data at off, extending the object as needed.
func (p *Pool) WriteAt(ctx context.Context, name string, off uint64, data []byte) error {
	for len(data) > MaxChunk {
		if _, err := p.do(ctx, &proto.Request{Op: proto.OpWrite, Object: name, Offset: off, Data: data[:MaxChunk]}); err != nil {
			return err
		}
		off += MaxChunk
		data = data[MaxChunk:]
	}
	_, err := p.do(ctx, &proto.Request{Op: proto.OpWrite, Object: name, Offset: off, Data: data})
	return err
}

// ReadAt reads up to length bytes at off; fewer at the end of the object.
// It returns the bytes read and the object's size.
func (p *Pool) ReadAt(ctx context.Context, name string, off, length uint64) ([]byte, uint64, error) {
	if length == 0 {
		return nil, 0, nil
	}
	var out []byte
	var size uint64
	for length > 0 {
		n := min(length, MaxChunk)
		resp, err := p.do(ctx, &proto.Request{Op: proto.OpRead, Object: name, Offset: off, Length: n})
		if err != nil {
			return nil, 0, err
		}
		size = resp.Size
		if out == nil && uint64(len(resp.Data)) == length {
			return resp.Data, size, nil
		}
		out = append(out, resp.Data...)
		if uint64(len(resp.Data)) < n {
			break
		}
		off += n
		length -= n
	}
	return out, size, nil
}

// ReadAtPooled is ReadAt for callers that hand the data's buffer back once
// done with it: release (never nil) returns it to the pool for the next
// large read, and data must not be used afterwards. Not calling release is
// safe, only slower.
func (p *Pool) ReadAtPooled(ctx context.Context, name string, off, length uint64) (data []byte, size uint64, release func(), err error) {
	if length == 0 || length > MaxChunk {
		data, size, err = p.ReadAt(ctx, name, off, length)
		return data, size, func() {}, err
	}
	resp, err := p.do(ctx, &proto.Request{Op: proto.OpRead, Object: name, Offset: off, Length: length})
	if err != nil {
		return nil, 0, func() {}, err
	}
	return resp.Data, resp.Size, resp.Release, nil
}

// Get reads the whole object.
func (p *Pool) Get(ctx context.Context, name string) ([]byte, error) {
	resp, err := p.do(ctx, &proto.Request{Op: proto.OpRead, Object: name, Length: MaxChunk})
	if err != nil {
		return nil, err
	}
	if resp.Size <= uint64(len(resp.Data)) {
		return resp.Data, nil
	}
	var buf bytes.Buffer
	buf.Grow(int(resp.Size))
	buf.Write(resp.Data)
	rest, _, err := p.ReadAt(ctx, name, uint64(len(resp.Data)), resp.Size-uint64(len(resp.Data)))
	if err != nil {
		return nil, err
	}
	buf.Write(rest)
	return buf.Bytes(), nil
}

// ObjectInfo describes an object.
type ObjectInfo struct {
	Name string `json:"name"`
	Size uint64 `json:"size"`
}

// Stat returns the object's size; ErrNotFound if it does not exist.
func (p *Pool) Stat(ctx context.Context, name string) (ObjectInfo, error) {
	resp, err := p.do(ctx, &proto.Request{Op: proto.OpStat, Object: name})
	if err != nil {
		return ObjectInfo{}, err
	}
	return ObjectInfo{Name: name, Size: resp.Size}, nil
}

// Truncate sets the object's size, creating it if absent.
func (p *Pool) Truncate(ctx context.Context, name string, size uint64) error {
	_, err := p.do(ctx, &proto.Request{Op: proto.OpTruncate, Object: name, Offset: size})
	return err
}

// Delete removes the object with its xattrs and omap; ErrNotFound if absent.
func (p *Pool) Delete(ctx context.Context, name string) error {
	_, err := p.do(ctx, &proto.Request{Op: proto.OpDelete, Object: name})
	return err
}

// SetXattr sets an extended attribute.
func (p *Pool) SetXattr(ctx context.Context, name, key string, value []byte) error {
	_, err := p.do(ctx, &proto.Request{Op: proto.OpSetXattr, Object: name, Key: key, Data: value})
	return err
}

// GetXattr returns an extended attribute; ErrNotFound if absent.
func (p *Pool) GetXattr(ctx context.Context, name, key string) ([]byte, error) {
	resp, err := p.do(ctx, &proto.Request{Op: proto.OpGetXattr, Object: name, Key: key})
	if err != nil {
		return nil, err
	}
	return resp.Data, nil
}

// RmXattr removes an extended attribute.
func (p *Pool) RmXattr(ctx context.Context, name, key string) error {
	_, err := p.do(ctx, &proto.Request{Op: proto.OpRmXattr, Object: name, Key: key})
	return err
}

// Xattrs returns all extended attributes of the object.
func (p *Pool) Xattrs(ctx context.Context, name string) (map[string][]byte, error) {
	resp, err := p.do(ctx, &proto.Request{Op: proto.OpListXattrs, Object: name})
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(resp.KVs))
	for _, kv := range resp.KVs {
		out[string(kv.Key)] = kv.Value
	}
	return out, nil
}

// OmapSet sets keys of the object's omap in one atomic write.
func (p *Pool) OmapSet(ctx context.Context, name string, kvs map[string][]byte) error {
	req := &proto.Request{Op: proto.OpOmapSet, Object: name}
	for k, v := range kvs {
		req.KVs = append(req.KVs, proto.KV{Key: []byte(k), Value: v})
	}
	_, err := p.do(ctx, req)
	return err
}

// OmapGet returns the values of the keys that exist.
func (p *Pool) OmapGet(ctx context.Context, name string, keys ...string) (map[string][]byte, error) {
	req := &proto.Request{Op: proto.OpOmapGet, Object: name}
	for _, k := range keys {
		req.Keys = append(req.Keys, []byte(k))
	}
	resp, err := p.do(ctx, req)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(resp.KVs))
	for _, kv := range resp.KVs {
		out[string(kv.Key)] = kv.Value
	}
	return out, nil
}

// OmapRm removes keys from the object's omap.
func (p *Pool) OmapRm(ctx context.Context, name string, keys ...string) error {
	req := &proto.Request{Op: proto.OpOmapRm, Object: name}
	for _, k := range keys {
		req.Keys = append(req.Keys, []byte(k))
	}
	_, err := p.do(ctx, req)
	return err
}

// KV is one omap entry.
type KV struct {
	Key   string
	Value []byte
}

// OmapList returns up to limit entries with start <= key < end in key order
// (end "" means no end), and whether more follow.
func (p *Pool) OmapList(ctx context.Context, name, start, end string, limit int) ([]KV, bool, error) {
	req := &proto.Request{Op: proto.OpOmapList, Object: name, Start: []byte(start), Limit: uint32(limit)}
	if end != "" {
		req.End = []byte(end)
	}
	resp, err := p.do(ctx, req)
	if err != nil {
		return nil, false, err
	}
	out := make([]KV, len(resp.KVs))
	for i, kv := range resp.KVs {
		out[i] = KV{Key: string(kv.Key), Value: kv.Value}
	}
	return out, resp.More, nil
}

// List calls fn with the name of every object in the pool, placement group
// by placement group (names are sorted within a group, not across groups).
func (p *Pool) List(ctx context.Context, fn func(name string) error) error {
	return p.list(ctx, "", fn)
}

// ListPrefix calls fn with the name of every object whose name starts with
// prefix. Each placement group's listing starts at prefix and stops past
// it, so the cost follows the matching objects (and the number of
// placement groups), not the pool's size.
func (p *Pool) ListPrefix(ctx context.Context, prefix string, fn func(name string) error) error {
	return p.list(ctx, prefix, fn)
}

func (p *Pool) list(ctx context.Context, prefix string, fn func(name string) error) error {
	info, err := p.Info()
	if err != nil {
		return err
	}
	for seed := uint32(0); seed < info.PGNum; seed++ {
		if err := p.listPG(ctx, seed, prefix, fn); err != nil {
			return err
		}
	}
	return nil
}

// listPG lists one placement group's objects that start with prefix.
func (p *Pool) listPG(ctx context.Context, seed uint32, prefix string, fn func(name string) error) error {
	after := ""
	if prefix != "" {
		// A listing starts after a name: the prefix less its last byte
		// sorts before every name that has the prefix.
		after = prefix[:len(prefix)-1]
	}
	for {
		s := seed
		resp, err := p.c.call(ctx, p.id, p.name, &s, &proto.Request{Op: proto.OpList, Start: []byte(after), Limit: 1000})
		if err != nil {
			return err
		}
		for _, n := range resp.Names {
			switch {
			case strings.HasPrefix(n, prefix):
				if err := fn(n); err != nil {
					return err
				}
			case n > prefix:
				return nil // names are sorted: none after this one matches
			}
		}
		if !resp.More {
			return nil
		}
		after = string(resp.Data)
	}
}
