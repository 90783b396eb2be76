package devcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cairn-storage/cairn/internal/conf"
)

// Restart backoff of a dev cluster's process that keeps exiting: the first
// restart comes after minBackoff, each quick one after twice the last, up
// to maxBackoff; a process that ran stableRun or longer starts over.
const (
	minBackoff = time.Second
	maxBackoff = 30 * time.Second
	stableRun  = time.Minute
	stopWait   = 15 * time.Second // SIGTERM to SIGKILL
)

// nextBackoff returns how long to wait before restarting a process that
// exited after running for ran, when the wait before its last restart was
// prev (0: it never exited before).
func nextBackoff(prev, ran time.Duration) time.Duration {
	if prev == 0 || ran >= stableRun {
		return minBackoff
	}
	return min(2*prev, maxBackoff)
}

// supervisor runs the processes of a dev cluster. It restarts one that
// exits (after nextBackoff) unless autoRestart is off, restarts one on
// request (`cairn dev restart`, over the unix socket DIR/dev.sock), keeps
// DIR/dev.json equal to the running pids, and stops them all in order.
// Every process it starts is its child, so Ctrl-C stops restarted ones too.
type supervisor struct {
	self, dir   string
	env         []string
	autoRestart bool
	logf        func(format string, args ...any)

	mu       sync.Mutex
	info     Info
	procs    []*proc
	stopping bool
	done     chan struct{} // closed when the cluster stops: watchers return
	// removed, when set, says why a process that exited must not be
	// restarted by itself ("" if it may be): an OSD removed from the map
	// (`cairn osd rm`) would only refuse to start again.
	removed func(name string) string
}

// proc is one supervised process; cmd, exited and started change under
// supervisor.mu with each start.
type proc struct {
	idx     int // its entry in info.Processes
	kick    chan chan RestartResult
	cmd     *exec.Cmd
	exited  chan struct{} // closed once cmd has exited and been reaped
	exitErr error
	started time.Time
}

// RestartResult is the answer to a restart request: the process's name,
// its new pid and the pid it replaced.
type RestartResult struct {
	Name   string `json:"name"`
	PID    int    `json:"pid"`
	OldPID int    `json:"old_pid"`
	Err    string `json:"error,omitempty"`
}

func newSupervisor(self, dir, confPath string, endpoints []string, autoRestart bool, logf func(string, ...any)) *supervisor {
	return &supervisor{
		self: self, dir: dir, autoRestart: autoRestart, logf: logf,
		env:  append(os.Environ(), conf.EnvVar+"="+confPath),
		info: Info{Conf: confPath, EtcdEndpoints: endpoints},
		done: make(chan struct{}),
	}
}

// start runs a new process of the cluster and supervises it from then on.
func (s *supervisor) start(name, addr, data string, args []string) error {
	s.mu.Lock()
	p := &proc{idx: len(s.info.Processes), kick: make(chan chan RestartResult)}
	s.info.Processes = append(s.info.Processes, Process{Name: name, Addr: addr, Data: data,
		Log: filepath.Join(s.dir, name+".log"), Args: append([]string{s.self}, args...)})
	s.procs = append(s.procs, p)
	err := s.spawnLocked(p)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	go s.watch(p)
	return nil
}

// setMetrics records in dev.json where process name serves its metrics.
func (s *supervisor) setMetrics(name, addr string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.info.Processes {
		if s.info.Processes[i].Name == name {
			s.info.Processes[i].Metrics = addr
		}
	}
	return s.writeInfoLocked()
}

// setDashboard records in dev.json the web dashboard's URL.
func (s *supervisor) setDashboard(url string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info.Dashboard = url
	return s.writeInfoLocked()
}

// snapshot returns a copy of dev.json's content as it is now.
func (s *supervisor) snapshot() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	info := s.info
	info.Processes = slices.Clone(s.info.Processes)
	return info
}

// spawnLocked starts p's command, records its pid and rewrites dev.json.
// On failure p counts as exited at once, so its watcher backs off and
// tries again.
func (s *supervisor) spawnLocked(p *proc) error {
	dp := &s.info.Processes[p.idx]
	p.exited, p.started = make(chan struct{}), time.Now()
	if s.stopping {
		p.exitErr = errors.New("cairn dev is stopping")
		close(p.exited)
		return p.exitErr
	}
	if err := s.execLocked(p, dp); err != nil {
		p.exitErr = err
		close(p.exited)
		return err
	}
	dp.PID = p.cmd.Process.Pid
	return s.writeInfoLocked()
}

// execLocked starts the process of dp and a goroutine that reaps it.
func (s *supervisor) execLocked(p *proc, dp *Process) error {
	lf, err := os.OpenFile(dp.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close()
	c := exec.Command(dp.Args[0], dp.Args[1:]...)
	c.Stdout, c.Stderr, c.Env = lf, lf, s.env
	// Own process group: a terminal's Ctrl-C reaches only us, and we stop
	// the children in order. Pdeathsig stops them if we are killed.
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := c.Start(); err != nil {
		return fmt.Errorf("dev: start %s: %w", dp.Name, err)
	}
	p.cmd = c
	exited := p.exited
	go func() {
		err := c.Wait()
		s.mu.Lock()
		p.exitErr = err
		s.mu.Unlock()
		close(exited)
	}()
	return nil
}

// writeInfoLocked replaces dev.json in one rename, so a reader never sees
// half of it.
func (s *supervisor) writeInfoLocked() error {
	b, _ := json.MarshalIndent(s.info, "", "  ")
	path := filepath.Join(s.dir, "dev.json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// watch restarts p when it exits (after a backoff, if autoRestart) or when
// a restart is requested, until the cluster stops.
func (s *supervisor) watch(p *proc) {
	var backoff time.Duration
	for {
		s.mu.Lock()
		exited, started := p.exited, p.started
		s.mu.Unlock()
		var reply chan RestartResult
		select {
		case <-s.done:
			return
		case reply = <-p.kick:
			s.terminate(p, exited)
		case <-exited:
			if s.isStopping() {
				return
			}
			backoff = nextBackoff(backoff, time.Since(started))
			var ok bool
			if reply, ok = s.awaitRestart(p, backoff); !ok {
				return
			}
		}
		s.respawn(p, reply)
	}
}

// awaitRestart logs p's exit and waits for the backoff to pass (with
// autoRestart) or for a restart request. It returns false if the cluster
// stops first.
func (s *supervisor) awaitRestart(p *proc, backoff time.Duration) (chan RestartResult, bool) {
	s.mu.Lock()
	dp, err := s.info.Processes[p.idx], p.exitErr
	s.mu.Unlock()
	why := s.whyNotRestart(dp.Name)
	var after <-chan time.Time
	switch {
	case why != "":
		s.logf("dev: %s (pid %d) exited: %v; not restarting it: %s", dp.Name, dp.PID, err, why)
	case s.autoRestart:
		s.logf("dev: %s (pid %d) exited: %v; restarting in %s (see %s)", dp.Name, dp.PID, err, backoff, dp.Log)
		after = time.After(backoff)
	default:
		s.logf("dev: %s (pid %d) exited: %v; see %s; `cairn dev restart %s --dir %s` starts it again",
			dp.Name, dp.PID, err, dp.Log, dp.Name, s.dir)
	}
	select {
	case <-s.done:
		return nil, false
	case reply := <-p.kick:
		return reply, true
	case <-after:
		return nil, true
	}
}

// respawn starts p again and answers the request that asked for it, if any.
func (s *supervisor) respawn(p *proc, reply chan RestartResult) {
	s.mu.Lock()
	old := s.info.Processes[p.idx].PID
	s.info.Processes[p.idx].Restarts++
	err := s.spawnLocked(p)
	res := RestartResult{Name: s.info.Processes[p.idx].Name, PID: s.info.Processes[p.idx].PID, OldPID: old}
	s.mu.Unlock()
	if err != nil {
		res.Err = err.Error()
		s.logf("dev: restarting %s: %v", res.Name, err)
	} else {
		s.logf("dev: restarted %s: pid %d (was %d)", res.Name, res.PID, old)
	}
	if reply != nil {
		reply <- res
	}
}

// terminate stops p's process gently, then not, and waits until it is reaped.
func (s *supervisor) terminate(p *proc, exited chan struct{}) {
	s.mu.Lock()
	c := p.cmd
	s.mu.Unlock()
	if c == nil {
		return
	}
	c.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(stopWait):
		c.Process.Kill()
		<-exited
	}
}

// setRemoved installs the check of whyNotRestart.
func (s *supervisor) setRemoved(fn func(name string) string) {
	s.mu.Lock()
	s.removed = fn
	s.mu.Unlock()
}

// whyNotRestart says why the process called name must not be restarted by
// itself, or "" if it may be.
func (s *supervisor) whyNotRestart(name string) string {
	s.mu.Lock()
	fn := s.removed
	s.mu.Unlock()
	if fn == nil {
		return ""
	}
	return fn(name)
}

func (s *supervisor) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// restart asks the watcher of the process called name (or osd.NAME for a
// number) to restart it, and returns once the new process has started.
func (s *supervisor) restart(ctx context.Context, name string) (RestartResult, error) {
	p, err := s.lookup(name)
	if err != nil {
		return RestartResult{}, err
	}
	reply := make(chan RestartResult, 1)
	select {
	case p.kick <- reply:
	case <-s.done:
		return RestartResult{}, errors.New("cairn dev is stopping")
	case <-ctx.Done():
		return RestartResult{}, ctx.Err()
	}
	select {
	case res := <-reply:
		if res.Err != "" {
			return res, errors.New(res.Err)
		}
		return res, nil
	case <-ctx.Done():
		return RestartResult{}, ctx.Err()
	}
}

// lookup finds a process by name; a bare number means that OSD.
func (s *supervisor) lookup(name string) (*proc, error) {
	if id, err := strconv.Atoi(name); err == nil && id >= 0 {
		name = "osd." + name
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for i, dp := range s.info.Processes {
		if dp.Name == name {
			return s.procs[i], nil
		}
		names = append(names, dp.Name)
	}
	return nil, fmt.Errorf("no process %q in this dev cluster; it has %s", name, strings.Join(names, ", "))
}

// stop ends every process: OSDs and the NBD server before the mon, gently
// first, and keeps them from being restarted.
func (s *supervisor) stop() {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return
	}
	s.stopping = true
	close(s.done)
	cmds, exits := make([]*exec.Cmd, len(s.procs)), make([]chan struct{}, len(s.procs))
	for i, p := range s.procs {
		cmds[i], exits[i] = p.cmd, p.exited
	}
	s.mu.Unlock()
	for i := len(cmds) - 1; i >= 0; i-- {
		if cmds[i] != nil {
			cmds[i].Process.Signal(syscall.SIGTERM)
		}
		if i == 0 && len(cmds) > 1 {
			time.Sleep(500 * time.Millisecond) // let OSDs mark themselves down while etcd is up
		}
	}
	deadline := time.After(stopWait)
	for i, c := range cmds {
		if c == nil {
			continue
		}
		select {
		case <-exits[i]:
		case <-deadline:
			c.Process.Kill()
			<-exits[i]
		}
	}
}

// socketPath is the path of the control socket of the dev cluster in dir.
func socketPath(dir string) string { return filepath.Join(dir, "dev.sock") }

// serve answers `cairn dev restart` on DIR/dev.sock until the cluster
// stops. Only the socket's owner may connect (mode 0600).
func (s *supervisor) serve() (func(), error) {
	path := socketPath(s.dir)
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("dev: another cairn dev is running on %s (it answers on %s); stop it first", s.dir, path)
	}
	os.Remove(path) // left by a cairn dev that was killed
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("dev: control socket %s: %w (a shorter --dir may help)", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /restart", s.handleRestart)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return func() { srv.Close() }, nil
}

// handleRestart serves POST /restart?name=osd.3.
func (s *supervisor) handleRestart(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), stopWait+15*time.Second)
	defer cancel()
	res, err := s.restart(ctx, r.URL.Query().Get("name"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(res)
}

// RequestRestart asks the cairn dev running on dir, over its control
// socket, to restart the process called name (osd.3, 3, mon.a, nbd), and
// returns once the new process has started.
func RequestRestart(ctx context.Context, dir, name string) (RestartResult, error) {
	path := socketPath(dir)
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://cairn-dev/restart?name="+url.QueryEscape(name), nil)
	if err != nil {
		return RestartResult{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return RestartResult{}, fmt.Errorf("no cairn dev answers on %s (%w): is one running with --dir %s?", path, err, dir)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return RestartResult{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return RestartResult{}, fmt.Errorf("cairn dev restart %s: %s", name, strings.TrimSpace(string(body)))
	}
	var res RestartResult
	return res, json.Unmarshal(body, &res)
}
