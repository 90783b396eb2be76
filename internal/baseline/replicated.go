package baseline

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Replicated writes through copies that do nothing else: the primary takes
// the client's bytes off the network, checks their crc32c, sends them to the
// other copies and writes and syncs its own; each other copy takes them off
// the network, checks, writes and syncs them; the primary answers when all
// have. No index, no metadata, no placement. Their latency one at a time is
// the latency bound's work with the wake-ups of real processes, and their
// CPU per GiB under load is the CPU floor a cluster's write runs are compared
// with. The copies are processes of their own (ServeCopy, started through
// Options.CopyCommand) on local sockets, as the OSDs of a one-machine
// cluster are.
const (
	// ReplicatedWriteSize is the size of the floor's writes (a 4 MiB
	// object, rados bench's default).
	ReplicatedWriteSize = 4 << 20
	// ReplicatedInFlight is the client's writes in flight.
	ReplicatedInFlight = 16

	replPiece   = 128 << 10 // read and summed at a time, while in the CPU cache
	replSlots   = 2 * ReplicatedInFlight
	replRing    = replSlots * ReplicatedWriteSize // each copy's file
	replHeader  = 16                              // id(8) length(4) crc32c(4)
	replReply   = 9                               // id(8) status(1)
	replStartup = time.Minute                     // for a copy to fill its file and listen

	modeWrite = 'W' // write frames, answered by replies
	modeUsage = 'U' // each byte read is answered by the copy's CPU time so far (8 bytes, ns)

	replOK     = 0
	replBadSum = 1 // the body's crc32c differs from the header's
	replFailed = 2 // a write, sync or copy failed
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CopyOptions configure ServeCopy.
type CopyOptions struct {
	// File is created, written once, written in a ring and removed at exit.
	File string
	// Peers are the other copies: every write goes to them before it is
	// written here, and is answered once they have answered.
	Peers []string
	// DataShards, if not zero, makes this copy the primary of an
	// erasure-coded write (erasure.go): each write is cut into DataShards
	// data shards and len(Peers)+1-DataShards parity shards; this copy
	// keeps the first, peer i gets shard i+1.
	DataShards int
	// Begin and End, if not nil, bracket each write on this copy's disk
	// (an OSD counts them so, for its runtime policy).
	Begin, End func()
}

// ServeCopy is one copy of the replicated-write measurement. It fills its
// file, listens on a local socket, writes "listening ADDR direct\n" to ready
// ("buffered" instead of "direct" where O_DIRECT does not work) and serves
// until ctx ends.
func ServeCopy(ctx context.Context, o CopyOptions, ready io.Writer) error {
	if o.File == "" {
		return errors.New("baseline copy: no file given")
	}
	if o.Begin == nil {
		o.Begin = func() {}
	}
	if o.End == nil {
		o.End = func() {}
	}
	s := &copyServer{o: o, bufs: make(chan []byte, replSlots)}
	var err error
	if o.DataShards > 0 {
		if len(o.Peers) == 0 {
			return errNoCoding
		}
		if s.ec, err = newShardEncoder(o.DataShards, len(o.Peers)+1-o.DataShards); err != nil {
			return err
		}
	}
	if s.f, s.direct, err = openRing(o.File); err != nil {
		return err
	}
	defer func() {
		s.f.Close()
		os.Remove(o.File)
	}()
	for _, addr := range o.Peers {
		p, err := dialFrames(ctx, addr)
		if err != nil {
			return fmt.Errorf("baseline copy: peer %s: %w", addr, err)
		}
		defer p.close()
		s.peers = append(s.peers, p)
	}
	// A local socket: the path between the daemons of one host.
	ln, err := listenOn(true)
	if err != nil {
		return fmt.Errorf("baseline copy: listen: %w", err)
	}
	srv := &connServer{ln: ln, conns: map[net.Conn]struct{}{}}
	srv.wg.Go(func() { srv.serve(s.handle) })
	defer srv.close()
	how := "direct"
	if !s.direct {
		how = "buffered"
	}
	if _, err := fmt.Fprintf(ready, "listening %s %s\n", ln.Addr(), how); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// openRing creates the ring file and writes it whole, so that later writes
// land on allocated, written blocks and a sync commits no metadata.
func openRing(name string) (f *os.File, direct bool, err error) {
	f, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_DIRECT, 0o600)
	direct = err == nil
	if errors.Is(err, syscall.EINVAL) { // tmpfs and the like
		f, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	}
	if err != nil {
		return nil, false, fmt.Errorf("baseline copy: %w", err)
	}
	buf := alignedBuf(ReplicatedWriteSize)
	for off := int64(0); off < replRing; off += ReplicatedWriteSize {
		if err = pwriteFull(int(f.Fd()), buf, off); err != nil {
			break
		}
	}
	if err == nil {
		err = unix.Fdatasync(int(f.Fd()))
	}
	if err != nil {
		f.Close()
		os.Remove(name)
		return nil, false, fmt.Errorf("baseline copy: filling %s: %w", name, err)
	}
	return f, direct, nil
}

type copyServer struct {
	o      CopyOptions
	f      *os.File
	direct bool
	next   atomic.Int64  // the next ring slot
	bufs   chan []byte   // free write buffers
	peers  []*frameConn  // the other copies
	ec     *shardEncoder // the primary of an erasure-coded write; nil: replicated
}

func (s *copyServer) buf() []byte {
	select {
	case b := <-s.bufs:
		return b
	default:
		return alignedBuf(ReplicatedWriteSize)
	}
}

func (s *copyServer) free(b []byte) {
	select {
	case s.bufs <- b[:cap(b)]:
	default:
	}
}

func (s *copyServer) handle(c net.Conn) {
	var mode [1]byte
	if _, err := io.ReadFull(c, mode[:]); err != nil {
		return
	}
	switch mode[0] {
	case modeUsage:
		var out [8]byte
		for {
			if _, err := io.ReadFull(c, mode[:]); err != nil {
				return
			}
			binary.BigEndian.PutUint64(out[:], uint64(processCPU()))
			if _, err := c.Write(out[:]); err != nil {
				return
			}
		}
	case modeWrite:
		s.serveWrites(c)
	}
}

// serveWrites reads write frames, each summed piece by piece as it arrives,
// and hands each to a goroutine of its own that answers it.
func (s *copyServer) serveWrites(c net.Conn) {
	var writes sync.WaitGroup // this connection's, answered before it closes
	defer writes.Wait()
	// Read straight from c: through a bufio.Reader, a piece that arrives
	// in parts had its second part read into the buffer and copied out of
	// it, which raised the floor by a sixth.
	var wmu sync.Mutex
	reply := func(id uint64, status byte) {
		var out [replReply]byte
		binary.BigEndian.PutUint64(out[:], id)
		out[8] = status
		wmu.Lock()
		defer wmu.Unlock()
		c.Write(out[:]) // a failed connection ends the read loop too
	}
	var h [replHeader]byte
	for {
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return
		}
		id := binary.BigEndian.Uint64(h[0:])
		n := int(binary.BigEndian.Uint32(h[8:]))
		want := binary.BigEndian.Uint32(h[12:])
		if n <= 0 || n > ReplicatedWriteSize || n%blockSize != 0 {
			return // not a client of ours
		}
		body := s.buf()[:n]
		var sum uint32
		for off := 0; off < n; off += replPiece {
			p := body[off:min(off+replPiece, n)]
			if _, err := io.ReadFull(c, p); err != nil {
				return
			}
			sum = crc32.Update(sum, castagnoli, p)
		}
		if sum != want {
			s.free(body)
			reply(id, replBadSum)
			continue
		}
		writes.Go(func() {
			st := s.write(body, want)
			s.free(body)
			reply(id, st)
		})
	}
}

// write sends body to the other copies, writes and syncs it here, and
// waits for their answers.
func (s *copyServer) write(body []byte, sum uint32) byte {
	if s.ec != nil {
		return s.writeShards(body)
	}
	waits := make([]<-chan byte, len(s.peers))
	for i, p := range s.peers {
		waits[i] = p.send(body, sum)
	}
	return s.writeHere(body, waits)
}

// writeHere writes and syncs body in the next ring slot, then waits for
// the peers' answers.
func (s *copyServer) writeHere(body []byte, waits []<-chan byte) byte {
	st := byte(replOK)
	s.o.Begin()
	off := (s.next.Add(1) - 1) % replSlots * ReplicatedWriteSize
	if pwriteFull(int(s.f.Fd()), body, off) != nil || unix.Fdatasync(int(s.f.Fd())) != nil {
		st = replFailed
	}
	s.o.End()
	for _, w := range waits {
		if <-w != replOK {
			st = replFailed
		}
	}
	return st
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// frameConn is a connection that carries write frames one way and replies
// the other, with any number of writes in flight.
type frameConn struct {
	c    net.Conn
	wmu  sync.Mutex // frame writes
	mu   sync.Mutex
	wait map[uint64]chan byte
	next uint64
	err  error // once the reader stopped
	done chan struct{}
}

func dialFrames(ctx context.Context, addr string) (*frameConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network(addr), addr)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte{modeWrite}); err != nil {
		c.Close()
		return nil, err
	}
	fc := &frameConn{c: c, wait: map[uint64]chan byte{}, done: make(chan struct{})}
	go fc.readReplies()
	return fc, nil
}

func (fc *frameConn) readReplies() {
	defer close(fc.done)
	r := bufio.NewReader(fc.c)
	var in [replReply]byte
	for {
		if _, err := io.ReadFull(r, in[:]); err != nil {
			fc.mu.Lock()
			fc.err = err
			for id, ch := range fc.wait {
				ch <- replFailed
				delete(fc.wait, id)
			}
			fc.mu.Unlock()
			return
		}
		id := binary.BigEndian.Uint64(in[:])
		fc.mu.Lock()
		ch := fc.wait[id]
		delete(fc.wait, id)
		fc.mu.Unlock()
		if ch != nil {
			ch <- in[8]
		}
	}
}

// send writes one frame and returns where its status will arrive.
func (fc *frameConn) send(body []byte, sum uint32) <-chan byte {
	ch := make(chan byte, 1)
	fc.mu.Lock()
	if fc.err != nil {
		fc.mu.Unlock()
		ch <- replFailed
		return ch
	}
	fc.next++
	id := fc.next
	fc.wait[id] = ch
	fc.mu.Unlock()
	var h [replHeader]byte
	binary.BigEndian.PutUint64(h[0:], id)
	binary.BigEndian.PutUint32(h[8:], uint32(len(body)))
	binary.BigEndian.PutUint32(h[12:], sum)
	fc.wmu.Lock()
	bufs := net.Buffers{h[:], body}
	_, err := bufs.WriteTo(fc.c)
	fc.wmu.Unlock()
	if err != nil {
		fc.c.Close() // the reader fails every write still waiting
	}
	return ch
}

func (fc *frameConn) close() {
	fc.c.Close()
	<-fc.done
}

// connServer serves each accepted connection on a goroutine of its own
// until closed.
type connServer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func (s *connServer) serve(handle func(net.Conn)) {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return // listener closed
		}
		s.mu.Lock()
		if s.conns == nil { // closing
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			handle(c)
		})
	}
}

// close stops the listener and every connection, and waits for the goroutines.
func (s *connServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.conns = nil
	s.mu.Unlock()
	s.wg.Wait()
}

// copyProc is a running copy process.
type copyProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
	file   string
	addr   string
	direct bool // O_DIRECT writes
	usage  net.Conn
}

// startCopy starts one copy and waits until it listens.
func startCopy(ctx context.Context, command []string, file string, peers, extra []string) (*copyProc, error) {
	args := append(append(append([]string{}, command[1:]...), "--file", file), extra...)
	for _, p := range peers {
		args = append(args, "--peer", p)
	}
	p := &copyProc{cmd: exec.Command(command[0], args...), file: file}
	p.cmd.Stderr = &p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", command[0], err)
	}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
		io.Copy(io.Discard, out)
	}()
	t := time.NewTimer(replStartup)
	defer t.Stop()
	var got string
	select {
	case got = <-line:
	case <-t.C:
	case <-ctx.Done():
	}
	f := strings.Fields(got)
	if len(f) != 3 || f[0] != "listening" {
		p.stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		msg := strings.TrimSpace(p.stderr.String())
		if msg == "" {
			msg = fmt.Sprintf("it did not say where it listens within %v", replStartup)
		}
		return nil, fmt.Errorf("copy %s: %s", filepath.Base(file), msg)
	}
	p.addr, p.direct = f[1], f[2] == "direct"
	var d net.Dialer
	if p.usage, err = d.DialContext(ctx, network(p.addr), p.addr); err == nil {
		_, err = p.usage.Write([]byte{modeUsage})
	}
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("copy %s: %w", filepath.Base(file), err)
	}
	return p, nil
}

// cpu asks the copy for the CPU time it has used.
func (p *copyProc) cpu() (time.Duration, error) {
	var in [8]byte
	p.usage.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := p.usage.Write([]byte{0}); err != nil {
		return 0, err
	}
	if _, err := io.ReadFull(p.usage, in[:]); err != nil {
		return 0, err
	}
	return time.Duration(binary.BigEndian.Uint64(in[:])), nil
}

// stop ends the copy (a copy exits when its standard input closes; one
// that does not within seconds is killed) and removes its file.
func (p *copyProc) stop() {
	if p.usage != nil {
		p.usage.Close()
	}
	p.stdin.Close()
	exited := make(chan struct{})
	go func() { p.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-exited
	}
	os.Remove(p.file)
}

// runReplicated starts SharedCopies copies with their files in dir and
// measures replicated 4 KiB writes one at a time (Write4KQD1), then 4 MiB
// writes ReplicatedInFlight at a time and the copies' CPU per GiB (Write4M).
func runReplicated(ctx context.Context, o Options, dir string, r *Result) error {
	rr := &replRun{ctx: ctx, o: o, n: SharedCopies, what: fmt.Sprintf("%d copies (processes)", SharedCopies)}
	defer rr.stop()
	if err := rr.start(dir); err != nil {
		return err
	}
	m, err := rr.measure(blockSize, 1)
	if err != nil {
		return err
	}
	m.CPUPerGiB = 0 // per GiB means little for 4 KiB writes one at a time
	m.Note += "; the latency of the replicated-write bound's work, done by processes that wake for it"
	r.Replicated.Write4KQD1 = m
	if m, err = rr.measure(ReplicatedWriteSize, ReplicatedInFlight); err != nil {
		return err
	}
	m.Note += "; CPU of the copies' processes per GiB the client wrote"
	r.Replicated.Write4M = m
	return nil
}

// checkReplSpace refuses to start when dir cannot hold n copies' rings.
func checkReplSpace(dir string, n int) error {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return fmt.Errorf("statfs %s: %v", dir, err)
	}
	need := int64(n) * replRing
	if free := int64(sfs.Bavail) * int64(sfs.Bsize); free < need {
		return fmt.Errorf("not enough free space in %s: need %s, %s free", dir, mib(need), mib(free))
	}
	return nil
}

// replRun is one measurement of replicated writes through copy processes.
type replRun struct {
	ctx         context.Context
	o           Options
	n           int         // copies
	primaryArgs []string    // more arguments of the primary's command
	what        string      // the copies, as a note says
	copies      []*copyProc // the primary last
	fc          *frameConn
	unwatch     func() bool
	body        []byte
}

// start starts the copies in dir and connects the client to the primary.
// rr.stop ends them, also when start fails.
func (rr *replRun) start(dir string) error {
	if err := checkReplSpace(dir, rr.n); err != nil {
		return err
	}
	if err := rr.startCopies(dir); err != nil {
		return err
	}
	primary := rr.copies[len(rr.copies)-1]
	fc, err := dialFrames(rr.ctx, primary.addr)
	if err != nil {
		return err
	}
	rr.fc = fc
	// Writes in flight end with ctx.
	rr.unwatch = context.AfterFunc(rr.ctx, func() { fc.c.SetDeadline(time.Now()) })
	rr.body = alignedBuf(ReplicatedWriteSize)
	fillRandom(rr.body, rand.New(rand.NewPCG(seed, 1<<36)))
	return nil
}

// startCopies starts the copy processes: the others first, then the
// primary, which forwards to them.
func (rr *replRun) startCopies(dir string) error {
	tag := strconv.FormatInt(int64(os.Getpid()), 10) + "-" + strconv.FormatUint(rand.Uint64()%1e6, 10)
	var peers []string
	for i := rr.n - 1; i >= 0; i-- {
		file := filepath.Join(dir, fmt.Sprintf(".cairn-baseline-copy%d-%s.tmp", i, tag))
		var pp, extra []string
		if i == 0 {
			pp, extra = peers, rr.primaryArgs
		}
		p, err := startCopy(rr.ctx, rr.o.CopyCommand, file, pp, extra)
		if err != nil {
			return err
		}
		rr.copies = append(rr.copies, p)
		peers = append(peers, p.addr)
	}
	return nil
}

func (rr *replRun) stop() {
	if rr.fc != nil {
		rr.unwatch()
		rr.fc.close()
	}
	for _, p := range rr.copies {
		p.stop()
	}
}

// usage is the CPU time the copy processes used so far.
func (rr *replRun) usage() (time.Duration, error) {
	var t time.Duration
	for _, p := range rr.copies {
		c, err := p.cpu()
		if err != nil {
			return 0, fmt.Errorf("asking copy %s for its CPU time: %w", filepath.Base(p.file), err)
		}
		t += c
	}
	return t, nil
}

// write sends one write through the copies and waits for its answer.
func (rr *replRun) write(b []byte, sum uint32) error {
	if st := <-rr.fc.send(b, sum); st != replOK {
		if st == replBadSum {
			return errors.New("a copy found the write's checksum wrong")
		}
		return errors.New("a copy failed to write, sync or forward a write")
	}
	return nil
}

// measure writes size bytes with inFlight in flight for o.Duration,
// after about two unmeasured writes per slot in flight, which bring the
// copies' buffers and the connections' windows to their working sizes.
func (rr *replRun) measure(size, inFlight int) (Measure, error) {
	ctx := rr.ctx
	b := rr.body[:size]
	sum := crc32.Checksum(b, castagnoli)
	write := func(*worker) error { return rr.write(b, sum) }
	if _, err := run(ctx, time.Hour, inFlight, int64(size), func(w *worker) error {
		if w.ops >= 2 {
			return errDone
		}
		return write(w)
	}, nil); err != nil || ctx.Err() != nil {
		return Measure{}, ctxErr(ctx, cmp.Or(err, ctx.Err()))
	}
	before, err := rr.usage()
	if err != nil {
		return Measure{}, err
	}
	m, err := run(ctx, rr.o.Duration, inFlight, int64(size), write, nil)
	if err == nil {
		err = ctx.Err() // run stops without an error when ctx ends
	}
	if err != nil {
		return Measure{}, ctxErr(ctx, err)
	}
	after, err := rr.usage()
	if err != nil {
		return Measure{}, err
	}
	if gib := float64(m.Ops) * float64(size) / (1 << 30); gib > 0 {
		m.CPUPerGiB = (after - before).Seconds() / gib
	}
	m.Note = fmt.Sprintf("%s, %s writes, %d in flight", rr.what, mib(int64(size)), inFlight)
	for _, p := range rr.copies {
		if !p.direct {
			m.Note += "; no O_DIRECT here: buffered writes"
			break
		}
	}
	return m, nil
}
