package baseline

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"time"
)

const (
	rttRequest = 4096
	rttReply   = 16
	rttWarmup  = 100 // round trips before the measured ones

	modeRTT    = 'R'
	modeStream = 'S'
)

// runNet measures the kernel's TCP loopback against an in-process server.
func runNet(ctx context.Context, o Options, r *Result) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("baseline: listening on 127.0.0.1: %w", err)
	}
	srv := &connServer{ln: ln, conns: map[net.Conn]struct{}{}}
	srv.wg.Go(func() { srv.serve(echo) })
	defer srv.close()
	addr := ln.Addr().String()

	o.Progress("net: TCP loopback round trips, 4 KiB request and 16 B reply, 1 in flight")
	m, err := rtt(ctx, o.Duration, addr)
	if err != nil {
		return fmt.Errorf("baseline: rtt_4k: %w", err)
	}
	r.Net.RTT4K = m
	if err := ctx.Err(); err != nil {
		return err
	}

	o.Progress("net: one TCP loopback stream, 1 MiB writes")
	m, err = stream(ctx, o.Duration, addr)
	if err != nil {
		return fmt.Errorf("baseline: stream: %w", err)
	}
	r.Net.StreamMBps = m
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
func dial(ctx context.Context, addr string, mode byte) (*net.TCPConn, func(), error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	tc := c.(*net.TCPConn)
	tc.SetNoDelay(true)
	stop := context.AfterFunc(ctx, func() { tc.SetDeadline(time.Now()) })
	if _, err := tc.Write([]byte{mode}); err != nil {
		stop()
		tc.Close()
		return nil, nil, err
	}
	return tc, func() { stop(); tc.Close() }, nil
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
		"sender and receiver took %.2f CPU s per GiB, what each hop of a byte over loopback costs", m.CPUPerGiB)
	return m, nil
}

// ctxErr prefers the context's error to the I/O error it caused.
func ctxErr(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
