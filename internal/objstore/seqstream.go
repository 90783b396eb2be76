package objstore

import (
	"sync"
	"sync/atomic"
)

// seqStreams notices writes that start where the previous write to the same
// data file ended. Once such a run has put its cutoff into the write-back
// area, its next writes bypass the area through the journal: the data disk
// takes a sequential stream at its bandwidth, and the area stays free for
// the random writes it is there for (bcache's sequential_cutoff). It keeps
// one run per slot of a small table, so its memory is fixed however many
// files are written; two streams sharing a slot only end each other's runs.
type seqStreams struct {
	cutoff   int64 // bytes of a run the area takes; <= 0: no bypass
	bypassed atomic.Int64
	mu       sync.Mutex
	slots    [seqSlots]seqRun
}

// seqSlots bounds the streams followed at once.
const seqSlots = 64

type seqRun struct {
	fileID, next uint64 // next: the block after the run's last write
	bytes        int64
}

// continues notes a write of the consecutive blocks ext of file fid and
// reports whether it continues a run already past the cutoff.
func (q *seqStreams) continues(fid uint64, ext []uint64) bool {
	if q.cutoff <= 0 || len(ext) == 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	r := &q.slots[fid%seqSlots]
	if r.fileID != fid || r.next != ext[0] {
		*r = seqRun{fileID: fid}
	}
	past := r.bytes >= q.cutoff
	r.next = ext[len(ext)-1] + 1
	r.bytes += int64(len(ext)) * blockSize
	if past {
		q.bypassed.Add(int64(len(ext)) * blockSize)
	}
	return past
}
