package objstore

// The seam where tests inject IO errors. Everything the store reads and
// writes through Options.FS can fail there already (tests wrap the FS with
// pebble's errorfs); these are the system calls made around it: O_DIRECT
// data and commit-log IO, punching holes and syncing the filesystem.

import "github.com/cockroachdb/pebble/v2/vfs"

// ioOp names a system call the store makes outside Options.FS.
type ioOp uint8

const (
	ioDirectWrite      ioOp = iota + 1 // O_DIRECT pwrite of a data file
	ioDirectRead                       // O_DIRECT pread of a data file
	ioDirectWriteDSync                 // O_DIRECT pwritev2(RWF_DSYNC): durable when it returns
	ioPunch                            // fallocate(PUNCH_HOLE) of a data file's old slot
	ioLogWrite                         // O_DIRECT|O_DSYNC pwrite of a commit-log segment
	ioSyncFS                           // syncfs of Dir's filesystem
)

// injectIO is nil but in tests. If set, it is asked before each such call,
// with the file's path, and the call fails with the error it returns
// instead of being made.
var injectIO func(op ioOp, path string) error

// testDefaultFS, set only by tests, stands in for vfs.Default when
// Options.FS is nil: the store still treats it as the real filesystem
// (O_DIRECT, syncfs), and a test can wrap vfs.Default to inject errors.
var testDefaultFS vfs.FS
