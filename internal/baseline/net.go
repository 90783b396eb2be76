package baseline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"time"
)

const (
	rttRequest = 4096
	rttReply   = 16
	rttWarmup  = 100 // round trips before the measured ones

	modeRTT    = 'R'
	modeStream = 'S'
)

// runNet measures the kernel's TCP loopback and its Unix sockets (the path
// between daemons of one host: rpc's local sockets) against an in-process
// server.
func runNet(ctx context.Context, o Options, r *Result) error {
	for _, t := range []struct {
		name      string
		rtt, strm *Measure
	}{{"TCP loopback", &r.Net.RTT4K, &r.Net.StreamMBps}, {"local socket", &r.Net.RTT4KLocal, &r.Net.StreamLocal}} {
		ln, err := listenOn(t.name == "local socket")
		if err != nil {
			return fmt.Errorf("baseline: %s: %w", t.name, err)
		}
		srv := &connServer{ln: ln, conns: map[net.Conn]struct{}{}}
		srv.wg.Go(func() { srv.serve(echo) })
		err = measureNet(ctx, o, t.name, ln.Addr().String(), t.rtt, t.strm)
		srv.close()
		if err != nil {
			return err
		}
	}
	return nil
}

// listenOn listens on a fresh port of 127.0.0.1 or, local, on a fresh
// name in the abstract Unix socket namespace.
func listenOn(local bool) (net.Listener, error) {
	if local {
		return net.Listen("unix", fmt.Sprintf("@cairn-baseline-%d-%x", os.Getpid(), rand.Uint64()))
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// network says how to dial addr: a name in the abstract namespace
// ("@...") is a Unix socket.
func network(addr string) string {
	if strings.HasPrefix(addr, "@") {
		return "unix"
	}
	return "tcp"
}

// measureNet measures round trips and a stream to the echo server at addr.
func measureNet(ctx context.Context, o Options, name, addr string, rttM, streamM *Measure) error {
	o.Progress("net: " + name + " round trips, 4 KiB request and 16 B reply, 1 in flight")
	m, err := rtt(ctx, o.Duration, addr)
	if err != nil {
		return fmt.Errorf("baseline: %s rtt_4k: %w", name, err)
	}
	*rttM = m
	if err := ctx.Err(); err != nil {
		return err
	}
	o.Progress("net: one " + name + " stream, 1 MiB writes")
	if m, err = stream(ctx, o.Duration, addr); err != nil {
		return fmt.Errorf("baseline: %s stream: %w", name, err)
	}
	*streamM = m
	return nil
}

// echo answers the two client protocols; the first byte of a connection
// says which:
//
//	'R'  repeat: read 4 KiB, write 16 B
//	'S'  read until EOF, then write the byte count (8 bytes, big-endian)
func echo(c net.Conn) {
	var mode [1]byte
	if _, err := io.ReadFull(c, mode[:]); err != nil {
		return
	}
	switch mode[0] {
	case modeRTT:
		req := make([]byte, rttRequest)
		reply := make([]byte, rttReply)
		for {
			if _, err := io.ReadFull(c, req); err != nil {
				return
			}
			if _, err := c.Write(reply); err != nil {
				return
			}
		}
	case modeStream:
		buf := make([]byte, chunkSize)
		var total uint64
		for {
			n, err := c.Read(buf)
			total += uint64(n)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return
			}
		}
		var out [8]byte
		binary.BigEndian.PutUint64(out[:], total)
		c.Write(out[:])
	}
}

// dial connects to the server in the given mode; the connection's deadline
// is set to now when ctx ends, so no call blocks past it.
func dial(ctx context.Context, addr string, mode byte) (halfCloser, func(), error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network(addr), addr)
	if err != nil {
		return nil, nil, err
	}
	tc := c.(halfCloser) // Go's TCP sockets are NoDelay already
	stop := context.AfterFunc(ctx, func() { tc.SetDeadline(time.Now()) })
	if _, err := tc.Write([]byte{mode}); err != nil {
		stop()
		tc.Close()
		return nil, nil, err
	}
	return tc, func() { stop(); tc.Close() }, nil
}

// halfCloser is a TCP or Unix socket: the stream's sender closes its half.
type halfCloser interface {
	net.Conn
	CloseWrite() error
}

func rtt(ctx context.Context, d time.Duration, addr string) (Measure, error) {
	c, done, err := dial(ctx, addr, modeRTT)
	if err != nil {
		return Measure{}, err
	}
	defer done()
	req := make([]byte, rttRequest)
	fillRandom(req, rand.New(rand.NewPCG(seed, 1<<35)))
	reply := make([]byte, rttReply)
	roundTrip := func(*worker) error {
		if _, err := c.Write(req); err != nil {
			return err
		}
		_, err := io.ReadFull(c, reply)
		return err
	}
	for range rttWarmup {
		if err := roundTrip(nil); err != nil {
			return Measure{}, ctxErr(ctx, err)
		}
	}
	m, err := run(ctx, d, 1, rttRequest, roundTrip, nil)
	return m, ctxErr(ctx, err)
}

func stream(ctx context.Context, d time.Duration, addr string) (Measure, error) {
	c, done, err := dial(ctx, addr, modeStream)
	if err != nil {
		return Measure{}, err
	}
	defer done()
	buf := make([]byte, chunkSize)
	var sent uint64
	cpu := processCPU() // the receiver runs in this process too
	m, err := run(ctx, d, 1, chunkSize, func(*worker) error {
		n, err := c.Write(buf)
		sent += uint64(n)
		return err
	}, func() error {
		// The time counts until the receiver has every byte.
		if err := c.CloseWrite(); err != nil {
			return err
		}
		var in [8]byte
		if _, err := io.ReadFull(c, in[:]); err != nil {
			return fmt.Errorf("reading the receiver's count: %w", err)
		}
		if got := binary.BigEndian.Uint64(in[:]); got != sent {
			return fmt.Errorf("receiver counted %d bytes, %d sent", got, sent)
		}
		return nil
	})
	if err != nil {
		return m, ctxErr(ctx, err)
	}
	if sent > 0 {
		m.CPUPerGiB = (processCPU() - cpu).Seconds() / (float64(sent) / (1 << 30))
	}
	m.Note = fmt.Sprintf("MB/s until the receiver has every byte; latencies are the 1 MiB writes'; "+
		"sender and receiver took %.2f CPU s per GiB, what each hop of a byte costs on this path", m.CPUPerGiB)
	return m, nil
}

// ctxErr prefers the context's error to the I/O error it caused.
func ctxErr(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
