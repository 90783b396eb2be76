package objstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
)

// IndexCorruptionError reports a damaged index: a file of the store's
// pebble index whose checksums do not match, that cannot be decoded, that
// is missing, or that made pebble panic. The index says which bytes belong
// to which object, so a store with a damaged index must not serve: its OSD
// is marked out and created again empty, and the other copies fill it.
// IsCorruption is true for it.
type IndexCorruptionError struct {
	Dir  string // the index directory (Options.MetaDir)
	File string // the damaged file's name, "" if unknown
	Err  error  // what was found
}

func (e *IndexCorruptionError) Error() string {
	where := e.Dir
	if e.File != "" {
		where = filepath.Join(e.Dir, e.File)
	}
	return fmt.Sprintf("objstore: the index is damaged (%s): %v", where, e.Err)
}

func (e *IndexCorruptionError) Unwrap() error { return e.Err }

// errStoreClosed is VerifyIndex's answer once Close has begun.
var errStoreClosed = errors.New("objstore: store is closed")

// noteIndexCorruption is pebble's DataCorruption event: it keeps the first
// report for openIndexChecked and VerifyIndex. Pebble's default would end
// the process from whatever goroutine found it (a read, a compaction, the
// table statistics it collects after opening), so a damaged file crashed
// the OSD at start instead of being refused with a clear message.
func (s *Store) noteIndexCorruption(info pebble.DataCorruptionInfo) {
	e := &IndexCorruptionError{Dir: s.opts.MetaDir, File: filepath.Base(info.Path), Err: info.Details}
	if s.indexDamage.CompareAndSwap(nil, e) {
		quietLogger{}.Errorf("%v", e)
	}
}

// noteBackgroundError is pebble's BackgroundError event. Damage met by a
// compaction is kept like noteIndexCorruption's, and logged once: pebble
// retries the compaction and would log the same error many times a second.
func (s *Store) noteBackgroundError(err error) {
	if !pebble.IsCorruptionError(err) {
		quietLogger{}.Errorf("background error: %v", err)
		return
	}
	e := s.damaged(err)
	if s.indexDamage.CompareAndSwap(nil, e) {
		quietLogger{}.Errorf("%v", e)
	}
}

// indexError turns an error from opening or reading the index into an
// IndexCorruptionError when it is pebble's corruption class, naming the
// file if pebble did.
func (s *Store) indexError(err error) error {
	if err == nil || !pebble.IsCorruptionError(err) {
		return err
	}
	return s.damaged(err)
}

// damaged returns an IndexCorruptionError for err, naming the file if
// pebble did.
func (s *Store) damaged(err error) *IndexCorruptionError {
	e := &IndexCorruptionError{Dir: s.opts.MetaDir, Err: err}
	if info := pebble.ExtractDataCorruptionInfo(err); info != nil {
		e.File = filepath.Base(info.Path)
	}
	return e
}

// guardIndex runs fn, which opens or reads the index, and turns a panic in
// it (pebble panics on some damage, and through quietLogger.Fatalf) into an
// IndexCorruptionError, and pebble's corruption errors too.
func (s *Store) guardIndex(fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &IndexCorruptionError{Dir: s.opts.MetaDir, Err: fmt.Errorf("pebble panicked: %v", p)}
		}
	}()
	return s.indexError(fn())
}

// VerifyIndex reads every live file (sstable) of the store's index and
// checks the checksum of each of its blocks, one file after another. It
// returns nil if all match and pebble has reported no damage since Open; a
// *IndexCorruptionError (IsCorruption is true) naming the first damaged
// file otherwise; ctx.Err() if ctx ends first. It reads the whole index
// (the sstables in Options.MetaDir), takes no lock that reads or writes
// wait for, and skips files that compactions remove while it runs: run it
// as a background check, about as often as a deep scrub of the whole store.
func (s *Store) VerifyIndex(ctx context.Context) error {
	return s.checkTables(ctx, true)
}

// checkTables opens every live sstable of the index, reading its footer,
// properties and index blocks, and with all also checks every block's
// checksum. A file that is missing is damage only while the index still
// lists it: compactions go on meanwhile, and remove the files they replace.
func (s *Store) checkTables(ctx context.Context, all bool) error {
	if e := s.indexDamage.Load(); e != nil {
		return e
	}
	select {
	case <-s.closing:
		return errStoreClosed
	default:
	}
	var levels [][]pebble.SSTableInfo
	if err := s.guardIndex(func() (err error) { levels, err = s.db.SSTables(); return err }); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, level := range levels {
		for _, t := range level {
			name := t.BackingSSTNum.String() + ".sst"
			if seen[name] || t.BackingType != pebble.BackingTypeLocal {
				continue
			}
			seen[name] = true
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := s.checkTable(ctx, name, all); err != nil {
				return err
			}
		}
	}
	if e := s.indexDamage.Load(); e != nil {
		return e
	}
	return nil
}

// tableLive reports whether the index lists the sstable called name now
// (and true if it cannot tell).
func (s *Store) tableLive(name string) bool {
	var levels [][]pebble.SSTableInfo
	if s.guardIndex(func() (err error) { levels, err = s.db.SSTables(); return err }) != nil {
		return true
	}
	for _, level := range levels {
		for _, t := range level {
			if t.BackingSSTNum.String()+".sst" == name {
				return true
			}
		}
	}
	return false
}

// checkTable opens one sstable and, with all, verifies every block of it.
func (s *Store) checkTable(ctx context.Context, name string, all bool) (err error) {
	path := s.fs.PathJoin(s.opts.MetaDir, name)
	f, err := s.fs.Open(path)
	if errors.Is(err, os.ErrNotExist) && !s.tableLive(name) {
		return nil // compacted away since the listing
	}
	if err != nil {
		return &IndexCorruptionError{Dir: s.opts.MetaDir, File: name, Err: err}
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("pebble panicked: %v", p)
		}
		if err != nil && ctx.Err() == nil {
			err = &IndexCorruptionError{Dir: s.opts.MetaDir, File: name, Err: err}
		}
	}()
	readable, err := objstorageprovider.NewFileReadable(f, s.fs, objstorageprovider.NewReadaheadConfig(), path)
	if err != nil {
		f.Close()
		return err
	}
	r, err := sstable.NewReader(ctx, readable, sstable.ReaderOptions{})
	if err != nil {
		readable.Close()
		return err
	}
	defer r.Close()
	if all {
		return r.ValidateBlockChecksums()
	}
	_, err = r.Layout()
	return err
}
