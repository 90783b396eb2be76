package cli

import (
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// Long-running processes (daemons, the gateway, the dev cluster, the
// benchmark client) run with the Go runtime's scheduler trace set to its
// longest period, about 25 days. Nothing is printed in between; what it
// changes is the runtime's monitor thread, sysmon:
//
//   - Without it, sysmon goes into a deep sleep whenever every P is idle,
//     and the next system call wakes it and sets its period back to 20 µs
//     for at least a millisecond. A storage daemon goes idle between
//     requests many times a millisecond and makes a system call for nearly
//     every request, so sysmon ran at its shortest period almost all the
//     time: under 1 MiB volume writes, the context switches of its 20 µs
//     sleeps were a large part of each OSD's CPU.
//   - With the trace on, sysmon never deep-sleeps (it must keep the trace's
//     time), so system calls never wake it; it backs off to 10 ms once it
//     has found nothing to do for a millisecond, as it does in a busy
//     process.
//
// Under 1 MiB volume writes an OSD then sleeps 20 µs at a time a small
// fraction as often, with fewer context switches and less CPU. The
// runtime reads GODEBUG only at start, so the process executes itself
// again with it set (same pid, same arguments). A GODEBUG that already
// names schedtrace is left as it is: set GODEBUG=schedtrace=0 to run
// without. The one trace line it prints comes when the monotonic clock
// passes the period: at start on a host up for more than 24.8 days, and
// every 24.8 days after.
const schedTraceEnv = "schedtrace=2147483647" // ms, the largest the runtime takes

// annLongRunning marks a command that gets the scheduler trace.
const annLongRunning = "cairn/long-running"

func longRunning(c *cobra.Command) *cobra.Command {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[annLongRunning] = "yes"
	return c
}

// withSchedTrace returns env with schedTraceEnv added to its GODEBUG, and
// false if GODEBUG already names schedtrace.
func withSchedTrace(env []string) ([]string, bool) {
	out := make([]string, 0, len(env)+1)
	found := false
	for _, kv := range env {
		v, ok := strings.CutPrefix(kv, "GODEBUG=")
		if !ok {
			out = append(out, kv)
			continue
		}
		for _, setting := range strings.Split(v, ",") {
			if strings.HasPrefix(strings.TrimSpace(setting), "schedtrace=") {
				return env, false
			}
		}
		if !found {
			found = true
			if v == "" {
				out = append(out, "GODEBUG="+schedTraceEnv)
			} else {
				out = append(out, "GODEBUG="+v+","+schedTraceEnv)
			}
		}
	}
	if !found {
		out = append(out, "GODEBUG="+schedTraceEnv)
	}
	return out, true
}

// reexecForSysmon executes this binary again, with the same arguments and
// the scheduler trace set, if cmd is long-running and the trace is not set
// yet. It returns only if it does not (or cannot) re-execute.
func reexecForSysmon(cmd *cobra.Command) {
	if cmd.Annotations[annLongRunning] == "" {
		return
	}
	env, ok := withSchedTrace(os.Environ())
	if !ok {
		return
	}
	exe, err := os.Executable()
	if err == nil {
		err = syscall.Exec(exe, os.Args, env)
	}
	fmt.Fprintf(os.Stderr, "cairn: running without %s (re-executing %s: %v)\n", schedTraceEnv, exe, err)
}
