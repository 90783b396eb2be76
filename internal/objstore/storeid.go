package objstore

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A store's data directory and its index belong together: the index says
// which data files are live, and Open deletes the others. So an index
// that is new (its meta device was replaced or wiped) must never be
// opened over a data directory that held objects, or it would take every
// file there for an orphan; nor an index over another store's data. Both
// halves carry the store's identity, a random id made when it is
// formatted: the index under keyStoreID, the data directory in the file
// storeIDFile. Open refuses a pair that does not match (ErrStoreMismatch).

const (
	storeIDFile   = "store-id"
	storeIDPrefix = "cairn objstore "
	storeIDBytes  = 16
)

// ErrStoreMismatch: the index and the data directory are not one store's.
var ErrStoreMismatch = errors.New("objstore: the index and the data directory do not belong to one store")

var keyStoreID = []byte{tagMeta, 's', 'i'}

// checkIdentity compares the index's store id with the data directory's.
// A store formatted before ids were kept gets one now.
func (s *Store) checkIdentity() error {
	inIndex, err := s.get(keyStoreID)
	if err != nil && !errors.Is(err, pebble.ErrNotFound) {
		return err
	}
	inData, err := s.readStoreID()
	if err != nil {
		return err
	}
	switch {
	case inIndex == nil && inData == "":
		return s.newIdentity()
	case string(inIndex) == inData:
		return nil
	case inIndex == nil:
		return s.mismatch("the data directory belongs to store %s; the index keeps no store id (an index older than the data directory's)", inData)
	case inData == "":
		return s.finishIdentity(string(inIndex))
	}
	return s.mismatch("the index belongs to store %s, the data directory to store %s", inIndex, inData)
}

// checkNoData refuses to format an index over a data directory that holds
// a store: its own index is missing.
func (s *Store) checkNoData() error {
	id, err := s.readStoreID()
	if err != nil {
		return err
	}
	if id != "" {
		return s.mismatch("the data directory belongs to store %s, but the index in %s is empty (a meta device replaced or wiped)", id, s.opts.MetaDir)
	}
	files, err := s.dataFiles()
	if err == nil && files {
		err = s.mismatch("the data directory holds data files, but the index in %s is empty (a meta device replaced or wiped)", s.opts.MetaDir)
	}
	return err
}

// finishIdentity handles an index with an id over a data directory without
// one: a crash while the id was being given (newIdentity writes the index
// first) left it so only if the index points at no data file and the
// directory holds none; then the id is written. Anything else is a data
// disk replaced or wiped under its index.
func (s *Store) finishIdentity(id string) error {
	refs := 0
	if _, err := s.scan([]byte{tagFileRef}, []byte{tagFileRef + 1}, 1, func(_, _ []byte) { refs++ }); err != nil {
		return err
	}
	files, err := s.dataFiles()
	if err != nil {
		return err
	}
	if refs > 0 || files {
		return s.mismatch("the index belongs to store %s; the data directory has no %s (a data disk replaced or wiped)", id, storeIDFile)
	}
	return s.writeStoreID(id)
}

// dataFiles says whether any fan-out directory holds a file.
func (s *Store) dataFiles() (bool, error) {
	for i := 0; i < 256; i++ {
		names, err := s.fs.List(s.fanDir(uint64(i)))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("objstore: list %s: %w", s.fanDir(uint64(i)), err)
		}
		if len(names) > 0 {
			return true, nil
		}
	}
	return false, nil
}

func (s *Store) mismatch(format string, args ...any) error {
	return fmt.Errorf("%w: %s; refusing to open %s without its own index: to reuse this OSD's disks, empty both %s and %s and start it again, and the cluster copies its data back from the other copies",
		ErrStoreMismatch, fmt.Sprintf(format, args...), s.opts.Dir, s.opts.Dir, s.opts.MetaDir)
}

// newIdentity gives a store its id: first in the index, made durable, then
// in the data directory (finishIdentity says why that order).
func (s *Store) newIdentity() error {
	var b [storeIDBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	id := hex.EncodeToString(b[:])
	if err := s.setDurable(keyStoreID, []byte(id)); err != nil {
		return err
	}
	return s.writeStoreID(id)
}

// writeStoreID writes the data directory's store id, durably.
func (s *Store) writeStoreID(id string) error {
	path := s.fs.PathJoin(s.opts.Dir, storeIDFile)
	f, err := s.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("objstore: create %s: %w", path, err)
	}
	_, err = io.WriteString(f, storeIDPrefix+id+"\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("objstore: write %s: %w", path, err)
	}
	return s.syncDir(s.opts.Dir)
}

// readStoreID reads the data directory's store id; "" if it has none.
func (s *Store) readStoreID() (string, error) {
	path := s.fs.PathJoin(s.opts.Dir, storeIDFile)
	f, err := s.fs.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("objstore: open %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 256))
	if err != nil {
		return "", fmt.Errorf("objstore: read %s: %w", path, err)
	}
	id, ok := strings.CutPrefix(strings.TrimSpace(string(b)), storeIDPrefix)
	if !ok || len(id) != 2*storeIDBytes {
		return "", s.mismatch("%s holds %q, not a store id", path, b)
	}
	return id, nil
}
