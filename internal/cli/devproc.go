package cli

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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cairn-storage/cairn/internal/conf"
	"github.com/spf13/cobra"
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

// devSupervisor runs the processes of a dev cluster. It restarts one that
// exits (after nextBackoff) unless autoRestart is off, restarts one on
// request (`cairn dev restart`, over the unix socket DIR/dev.sock), keeps
// DIR/dev.json equal to the running pids, and stops them all in order.
// Every process it starts is its child, so Ctrl-C stops restarted ones too.
type devSupervisor struct {
	self, dir   string
	env         []string
	autoRestart bool

	mu       sync.Mutex
	info     DevInfo
	procs    []*devProc
	stopping bool
	done     chan struct{} // closed when the cluster stops: watchers return
	// removed, when set, says why a process that exited must not be
	// restarted by itself ("" if it may be): an OSD removed from the map
	// (`cairn osd rm`) would only refuse to start again.
	removed func(name string) string
}

// devProc is one supervised process; cmd, exited and started change under
// devSupervisor.mu with each start.
type devProc struct {
	idx     int // its entry in info.Processes
	kick    chan chan restartResult
	cmd     *exec.Cmd
	exited  chan struct{} // closed once cmd has exited and been reaped
	exitErr error
	started time.Time
}

// restartResult is the answer to a restart request.
type restartResult struct {
	Name   string `json:"name"`
	PID    int    `json:"pid"`
	OldPID int    `json:"old_pid"`
	Err    string `json:"error,omitempty"`
}

func newDevSupervisor(self, dir, confPath string, endpoints []string, autoRestart bool) *devSupervisor {
	return &devSupervisor{
		self: self, dir: dir, autoRestart: autoRestart,
		env:  append(os.Environ(), conf.EnvVar+"="+confPath),
		info: DevInfo{Conf: confPath, EtcdEndpoints: endpoints},
		done: make(chan struct{}),
	}
}

// start runs a new process of the cluster and supervises it from then on.
func (s *devSupervisor) start(name, addr, data string, args []string) error {
	s.mu.Lock()
	p := &devProc{idx: len(s.info.Processes), kick: make(chan chan restartResult)}
	s.info.Processes = append(s.info.Processes, DevProcess{Name: name, Addr: addr, Data: data,
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

// snapshot returns a copy of dev.json's content as it is now.
func (s *devSupervisor) snapshot() DevInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	info := s.info
	info.Processes = slices.Clone(s.info.Processes)
	return info
}

// spawnLocked starts p's command, records its pid and rewrites dev.json.
// On failure p counts as exited at once, so its watcher backs off and
// tries again.
func (s *devSupervisor) spawnLocked(p *devProc) error {
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
func (s *devSupervisor) execLocked(p *devProc, dp *DevProcess) error {
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
func (s *devSupervisor) writeInfoLocked() error {
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
func (s *devSupervisor) watch(p *devProc) {
	var backoff time.Duration
	for {
		s.mu.Lock()
		exited, started := p.exited, p.started
		s.mu.Unlock()
		var reply chan restartResult
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
func (s *devSupervisor) awaitRestart(p *devProc, backoff time.Duration) (chan restartResult, bool) {
	s.mu.Lock()
	dp, err := s.info.Processes[p.idx], p.exitErr
	s.mu.Unlock()
	why := s.whyNotRestart(dp.Name)
	var after <-chan time.Time
	switch {
	case why != "":
		logger.Printf("dev: %s (pid %d) exited: %v; not restarting it: %s", dp.Name, dp.PID, err, why)
	case s.autoRestart:
		logger.Printf("dev: %s (pid %d) exited: %v; restarting in %s (see %s)", dp.Name, dp.PID, err, backoff, dp.Log)
		after = time.After(backoff)
	default:
		logger.Printf("dev: %s (pid %d) exited: %v; see %s; `cairn dev restart %s --dir %s` starts it again",
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
func (s *devSupervisor) respawn(p *devProc, reply chan restartResult) {
	s.mu.Lock()
	old := s.info.Processes[p.idx].PID
	s.info.Processes[p.idx].Restarts++
	err := s.spawnLocked(p)
	res := restartResult{Name: s.info.Processes[p.idx].Name, PID: s.info.Processes[p.idx].PID, OldPID: old}
	s.mu.Unlock()
	if err != nil {
		res.Err = err.Error()
		logger.Printf("dev: restarting %s: %v", res.Name, err)
	} else {
		logger.Printf("dev: restarted %s: pid %d (was %d)", res.Name, res.PID, old)
	}
	if reply != nil {
		reply <- res
	}
}

// terminate stops p's process gently, then not, and waits until it is reaped.
func (s *devSupervisor) terminate(p *devProc, exited chan struct{}) {
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
func (s *devSupervisor) setRemoved(fn func(name string) string) {
	s.mu.Lock()
	s.removed = fn
	s.mu.Unlock()
}

// whyNotRestart says why the process called name must not be restarted by
// itself, or "" if it may be.
func (s *devSupervisor) whyNotRestart(name string) string {
	s.mu.Lock()
	fn := s.removed
	s.mu.Unlock()
	if fn == nil {
		return ""
	}
	return fn(name)
}

func (s *devSupervisor) isStopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// restart asks the watcher of the process called name (or osd.NAME for a
// number) to restart it, and returns once the new process has started.
func (s *devSupervisor) restart(ctx context.Context, name string) (restartResult, error) {
	p, err := s.lookup(name)
	if err != nil {
		return restartResult{}, err
	}
	reply := make(chan restartResult, 1)
	select {
	case p.kick <- reply:
	case <-s.done:
		return restartResult{}, errors.New("cairn dev is stopping")
	case <-ctx.Done():
		return restartResult{}, ctx.Err()
	}
	select {
	case res := <-reply:
		if res.Err != "" {
			return res, errors.New(res.Err)
		}
		return res, nil
	case <-ctx.Done():
		return restartResult{}, ctx.Err()
	}
}

// lookup finds a process by name; a bare number means that OSD.
func (s *devSupervisor) lookup(name string) (*devProc, error) {
	if _, err := parseOSDID(name); err == nil && !strings.HasPrefix(name, "osd.") {
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
func (s *devSupervisor) stop() {
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

// devSocket is the path of the control socket of the dev cluster in dir.
func devSocket(dir string) string { return filepath.Join(dir, "dev.sock") }

// serve answers `cairn dev restart` on DIR/dev.sock until the cluster
// stops. Only the socket's owner may connect (mode 0600).
func (s *devSupervisor) serve() (func(), error) {
	path := devSocket(s.dir)
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
func (s *devSupervisor) handleRestart(w http.ResponseWriter, r *http.Request) {
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

func devRestartCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "restart NAME...",
		Short: "restart processes of a running cairn dev cluster: osd.3 (or 3), mon.a, nbd",
		Long: `Asks the cairn dev running on --dir to stop the named processes (SIGTERM,
then SIGKILL after 15 s) and start them again with the same arguments, one
after the other. A process that has exited is started at once. The new pids
are in DIR/dev.json, and stopping cairn dev stops them too.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, name := range args {
				res, err := requestDevRestart(cmd.Context(), dir, name)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "restarted %s: pid %d (was %d)\n", res.Name, res.PID, res.OldPID)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "cairn-dev", "directory of the running cairn dev cluster")
	return cmd
}

// requestDevRestart asks the cairn dev on dir, over its control socket, to
// restart one process.
func requestDevRestart(ctx context.Context, dir, name string) (restartResult, error) {
	path := devSocket(dir)
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://cairn-dev/restart?name="+url.QueryEscape(name), nil)
	if err != nil {
		return restartResult{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return restartResult{}, fmt.Errorf("no cairn dev answers on %s (%w): is one running with --dir %s?", path, err, dir)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return restartResult{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return restartResult{}, fmt.Errorf("cairn dev restart %s: %s", name, strings.TrimSpace(string(body)))
	}
	var res restartResult
	return res, json.Unmarshal(body, &res)
}
