package baseline

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/klauspost/reedsolomon"
)

// Erasure-coded writes through copies that do nothing else: the primary
// takes the client's bytes off the network and checks their crc32c as a
// replicated primary does, cuts them into ECDataShards data shards,
// computes ECParityShards parity shards with the Reed-Solomon code cairn's
// pools use, sends each other position its shard with the shard's crc32c
// and writes and syncs its own; the others check, write and sync theirs.
// Their CPU per GiB is the floor a cluster's writes to a pool of that
// profile are compared with: an erasure-coded write moves and writes
// (K+M)/K times its bytes instead of SharedCopies times, and pays for the
// encoding.
const (
	ECDataShards   = 2
	ECParityShards = 1
)

// ECProfile is the floor's erasure code as a pool names it ("2+1").
func ECProfile() string { return fmt.Sprintf("%d+%d", ECDataShards, ECParityShards) }

// shardEncoder cuts a write into the shards of an erasure code.
type shardEncoder struct {
	enc  reedsolomon.Encoder
	k, m int
	free chan []byte // buffers for parity and padded data shards
}

func newShardEncoder(k, m int) (*shardEncoder, error) {
	if k < 1 || m < 1 {
		return nil, fmt.Errorf("baseline copy: erasure code %d+%d: needs at least 1 data and 1 parity shard (as many copies as data shards plus 1)", k, m)
	}
	enc, err := reedsolomon.New(k, m)
	if err != nil {
		return nil, fmt.Errorf("baseline copy: erasure code %d+%d: %w", k, m, err)
	}
	return &shardEncoder{enc: enc, k: k, m: m, free: make(chan []byte, replSlots*(k+m))}, nil
}

// shardLen is the length of each shard of an n-byte write: n/k rounded up
// to whole blocks, so every shard is a frame a copy accepts.
func (e *shardEncoder) shardLen(n int) int {
	per := (n + e.k - 1) / e.k
	return (per + blockSize - 1) / blockSize * blockSize
}

func (e *shardEncoder) buf(n int) []byte {
	select {
	case b := <-e.free:
		if cap(b) >= n {
			return b[:n]
		}
	default:
	}
	return alignedBuf(n)
}

// encode returns the k+m shards of body. Data shards are slices of body
// where it divides into whole shards (a 4 MiB write does), copies padded
// with zeros elsewhere. release hands the buffers back once the shards
// are written and sent.
func (e *shardEncoder) encode(body []byte) (shards [][]byte, release func(), err error) {
	n := e.shardLen(len(body))
	shards = make([][]byte, e.k+e.m)
	var owned [][]byte
	for i := range shards {
		lo, hi := min(i*n, len(body)), min((i+1)*n, len(body))
		if i < e.k && hi-lo == n {
			shards[i] = body[lo:hi]
			continue
		}
		b := e.buf(n)
		clear(b[copy(b, body[lo:hi]):])
		shards[i], owned = b, append(owned, b)
	}
	release = func() {
		for _, b := range owned {
			select {
			case e.free <- b:
			default:
			}
		}
	}
	if err := e.enc.Encode(shards); err != nil {
		release()
		return nil, nil, err
	}
	return shards, release, nil
}

// writeShards encodes body, sends shard i+1 to peer i, writes and syncs
// shard 0 here and waits for the peers' answers.
func (s *copyServer) writeShards(body []byte) byte {
	shards, release, err := s.ec.encode(body)
	if err != nil {
		return replFailed
	}
	defer release()
	waits := make([]<-chan byte, len(s.peers))
	for i, p := range s.peers {
		sh := shards[i+1]
		waits[i] = p.send(sh, crc32.Checksum(sh, castagnoli))
	}
	return s.writeHere(shards[0], waits)
}

// runErasure starts ECDataShards+ECParityShards copies, the primary
// coding, and measures 4 MiB writes ReplicatedInFlight at a time and the
// copies' CPU per GiB (Erasure.Write4M).
func runErasure(ctx context.Context, o Options, dir string, r *Result) error {
	n := ECDataShards + ECParityShards
	rr := &replRun{ctx: ctx, o: o, n: n, what: fmt.Sprintf("%s erasure code: %d positions (processes)", ECProfile(), n),
		primaryArgs: []string{"--data-shards", fmt.Sprint(ECDataShards)}}
	defer rr.stop()
	if err := rr.start(dir); err != nil {
		return err
	}
	m, err := rr.measure(ReplicatedWriteSize, ReplicatedInFlight)
	if err != nil {
		return err
	}
	m.Note += "; CPU of the positions' processes per GiB the client wrote"
	r.Erasure.Write4M = m
	return nil
}

// errNoCoding: a copy told to code has no peers to send shards to.
var errNoCoding = errors.New("baseline copy: --data-shards needs the other positions as --peer")
