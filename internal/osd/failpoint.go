package osd

import (
	"context"
	"os"
	"strconv"
	"strings"

	"github.com/cairn-storage/cairn/internal/proto"
)

// FailpointECPartialPut names the environment variable of a failpoint for
// tests of erasure-coded writes cut short. Unset (always, outside tests)
// it does nothing. Set to a file's path, the first OSD whose put (or
// write at an offset, truncate, create, or change of xattrs or omap) to
// an erasure-coded pool finds that
// file takes it (renames it, so one put of
// the whole cluster fires), applies the put only to the first N positions
// of the acting set, N being the file's content (its own position
// first), and exits at once with failpointExit, as a primary that crashes
// mid-write would: the put is never answered.
const FailpointECPartialPut = "CAIRN_FAILPOINT_EC_PARTIAL_PUT"

// failpointExit is the exit status of an OSD the failpoint stopped.
const failpointExit = 86

var partialPutFile = os.Getenv(FailpointECPartialPut)

// ecPartialPut fires the failpoint for write w if it is set and armed.
func ecPartialPut(s *Server, req *proto.Request, w *writePlan) bool {
	if partialPutFile == "" || req.Op != proto.OpPut && req.Op != proto.OpWrite && req.Op != proto.OpTruncate && !isECKeysWrite(req.Op) {
		return false
	}
	fired := partialPutFile + ".fired"
	if os.Rename(partialPutFile, fired) != nil {
		return false
	}
	b, _ := os.ReadFile(fired)
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 1 {
		n = 1
	}
	f := &fanout{s: s, req: req, w: w}
	reached := 0
	for _, o := range w.writeSet { // the positions the write reaches
		if reached == n {
			break
		}
		if o == s.id {
			if s.applyShardWrite(shardColl(req.PG, w.shardMetas[o].Position), req.Object, w.shardMetas[o], w.txn, w.shardFlags(o)) == nil {
				reached++
			}
			continue
		}
		addr, ok := w.t.Map().OSD(o)
		if !ok {
			continue
		}
		if resp, err := s.peers.Call(context.Background(), addr.Addr, f.request(w.t, o, w.txnFor(o).Marshal())); err == nil && resp.Status == proto.StatusOK {
			reached++
		}
	}
	s.logf("%s: failpoint %s: %s of %q in pg %s applied on %d position(s) of %d, exiting", s.id, FailpointECPartialPut, req.Op, req.Object, req.PG, reached, len(w.acting))
	os.Exit(failpointExit)
	return true
}

// FailpointECSkewShard names the environment variable of a failpoint for
// tests of deep scrub. Unset (always, outside tests) it does nothing. Set
// to a position N, a put to an erasure-coded pool of an object whose name
// starts with "skewed" gives position N its shard with the first byte
// inverted: a shard that passes its checksums but does not code with the
// others.
const FailpointECSkewShard = "CAIRN_FAILPOINT_EC_SKEW_SHARD"

var skewPosition = os.Getenv(FailpointECSkewShard)

// skewShard returns data, position i's shard of object name, skewed if
// the failpoint says so.
func skewShard(name string, i int, data []byte) []byte {
	if skewPosition == "" || len(data) == 0 || !strings.HasPrefix(name, "skewed") || skewPosition != strconv.Itoa(i) {
		return data
	}
	out := append([]byte(nil), data...)
	out[0] ^= 0xff
	return out
}
