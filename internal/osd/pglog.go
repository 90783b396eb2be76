package osd

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cairn-storage/cairn/internal/clustermap"
	"github.com/cairn-storage/cairn/internal/proto"
)

// pgMetaObject holds a placement group's own state in its collection: the
// PG log lives in its omap, one key per version. Its name starts with the
// reserved prefix, so no client object can collide with it.
const pgMetaObject = proto.ReservedPrefix + "pgmeta"

// logKeep bounds the PG log: recovery of an OSD that missed more than this
// many writes falls back to a full copy (backfill).
const logKeep = 2048

// logKey is the omap key of a PG log entry: the version, big-endian, so that
// omap order is version order.
func logKey(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// logEnd bounds the log's keys: other PG metadata keys start with 0xff.
var logEnd = []byte{0xff}

// logEntry records one write in the PG log.
//
// Encoding (version 1): [1 format][1 op][uvarint epoch][uvarint len][object name].
type logEntry struct {
	Op     proto.Op
	Epoch  clustermap.Epoch
	Object string
}

const logFormat = 1

func (e *logEntry) encode() []byte {
	b := make([]byte, 0, 2+binary.MaxVarintLen64*2+len(e.Object))
	b = append(b, logFormat, byte(e.Op))
	b = binary.AppendUvarint(b, uint64(e.Epoch))
	b = binary.AppendUvarint(b, uint64(len(e.Object)))
	return append(b, e.Object...)
}

var errBadLogEntry = errors.New("pg log entry: malformed")

func decodeLogEntry(b []byte) (logEntry, error) {
	if len(b) < 2 || b[0] != logFormat {
		return logEntry{}, fmt.Errorf("%w: unknown format", errBadLogEntry)
	}
	e := logEntry{Op: proto.Op(b[1])}
	if !e.Op.Valid() {
		return logEntry{}, fmt.Errorf("%w: op %d", errBadLogEntry, b[1])
	}
	b = b[2:]
	ep, n := binary.Uvarint(b)
	if n <= 0 {
		return logEntry{}, fmt.Errorf("%w: epoch", errBadLogEntry)
	}
	b = b[n:]
	l, n := binary.Uvarint(b)
	if n <= 0 || l != uint64(len(b)-n) {
		return logEntry{}, fmt.Errorf("%w: name length", errBadLogEntry)
	}
	e.Epoch = clustermap.Epoch(ep)
	e.Object = string(b[n:])
	return e, nil
}
