package osd

import (
	"strconv"
	"syscall"

	"github.com/cairn-storage/cairn/internal/proto"
)

// status answers OpStatus with the process's resource use, so benchmarks
// can charge the CPU the cluster spent to the work they did.
func (s *Server) status() *proto.Response {
	var ru syscall.Rusage
	r := s.ok()
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return s.fail(proto.StatusIOError, "getrusage: %v", err)
	}
	cpu := ru.Utime.Nano() + ru.Stime.Nano()
	r.KVs = []proto.KV{
		{Key: []byte(proto.StatusKeyCPUNanos), Value: []byte(strconv.FormatInt(cpu, 10))},
		{Key: []byte(proto.StatusKeyMaxRSS), Value: []byte(strconv.FormatInt(ru.Maxrss*1024, 10))},
	}
	return r
}
