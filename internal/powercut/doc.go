// Package powercut is a filesystem for tests that loses power: a FUSE
// passthrough over a backing directory that keeps every write not yet made
// durable in a volatile layer, and on Cut drops it, as a machine that loses
// power (or a kernel that crashes, or a disk with a volatile write cache)
// loses what was not synced. SIGKILL tests cannot show this: the kernel
// keeps a killed process's writes.
//
// Use it for crash tests of programs that write to real files with real
// system calls (O_DIRECT, pwritev2, fallocate, fsync, fdatasync): mount it
// (ForTest in a test), run the program on Dir, Cut or CutHarsh at any
// moment, kill or abandon the program, Remount, and check what survived
// against what the program acknowledged. Do not use it for speed: every
// request crosses FUSE and one lock.
//
// It imports nothing of cairn. Its tests need /dev/fuse and fusermount3
// (Debian: apt-get install fuse3) and run as root here (mount(2) directly;
// fusectl to abort a mount that a dead program still holds).
//
// # What is volatile, and what makes it durable
//
// The backing directory always holds exactly the durable state; the
// volatile layer is in memory. The model is POSIX's, strictly, which is at
// least as harsh as ext4 with data=ordered on a disk with a volatile cache:
//
//   - File data (writes, O_DIRECT writes alike, size changes by truncate,
//     fallocate of any mode: preallocation, PUNCH_HOLE|KEEP_SIZE,
//     ZERO_RANGE) is volatile until the file is fsynced or fdatasynced
//     (through any descriptor: FUSE FSYNC). Writes of descriptors opened
//     O_SYNC or O_DSYNC, and pwritev2 with RWF_SYNC or RWF_DSYNC, are durable
//     when they return (the kernel marks them and sends FSYNC after them). An
//     O_DIRECT write is treated as a disk with a volatile cache treats it:
//     not durable until the file's fsync or fdatasync. (A real cache flush
//     would also persist other files' completed O_DIRECT writes; this
//     filesystem does not, which is harsher.) close(2) makes nothing
//     durable.
//   - Names (create, mkdir, unlink, rmdir, rename) are volatile until the
//     directory that holds them is fsynced; fsync of a file does not make its
//     name durable (ext4 would, as a side effect of its journal commit, but a
//     program that forgets the directory sync is wrong on other
//     filesystems). A directory's fsync persists all its entries as they are;
//     a rename is one atomic change, so syncing either of its directories
//     persists both of its ends. A file made durable before its name lives
//     nameless (in a stage directory beside the backing one) and is freed by
//     a cut, as a journaling filesystem frees orphan inodes; a new
//     directory's entries survive only once the directory itself has a
//     durable name.
//   - syncfs(2) and sync(2): the kernel sends a FUSE filesystem nothing for
//     them (FUSE_SYNCFS goes to virtiofs servers only; TestSyncFS checks it on
//     this kernel), so on this mount, as on every FUSE mount, they make
//     nothing durable. A program that relies on syncfs loses data here, as
//     it would on any FUSE filesystem in production (objstore found this
//     way that it must fsync each file on FUSE). SyncFS makes everything
//     durable, as syncfs on a disk filesystem does for everything written
//     before the call, for a test that wants to model that instead.
//   - A clean Unmount, or Remount without a cut, makes everything durable
//     (umount writes everything back).
//   - Memory is bounded (Options.MaxVolatileBytes, 256 MiB): past it the
//     files with the most volatile data are made durable, as a page cache
//     under pressure and a full disk cache write back early. Stats counts
//     these forced writebacks; a test that wants every byte at risk checks
//     that there were none.
//
// Hard links, symbolic links, device nodes and extended attributes are not
// modelled (EPERM or ENOSYS); timestamps and ownership are not persisted.
//
// # Cuts
//
// Cut drops the volatile layer. CutHarsh(seed) first lets a random part of
// it reach the disk, as a disk cache that wrote back some of its content in
// its own order: each directory with pending entries persists all of them
// or none; then, for each file that keeps a durable name, each volatile op
// lands or not, the ones that land in random order, and a write spanning
// more than one 512-byte sector (at file offsets that are multiples of 512)
// may land torn: each sector whole or not at all. The seed decides all of
// it (iteration is in inode order, so a sequential workload replays
// exactly) and is logged through Options.Logf.
//
// After a cut the mount answers every request with EIO, like a dead disk,
// until Remount, which mounts the surviving state at a new Dir (the old
// mount point is removed, so a program left running on the dead mount
// cannot reach the new one by its paths, and the old connection is
// aborted).
//
// A program under test is best run in a child process (TestPebbleSurvivesCuts
// does): many programs panic when their disk dies (pebble does), and a test
// process that dies while it holds files on its own mount cannot exit (its
// exit flushes them to the server it was).
package powercut
