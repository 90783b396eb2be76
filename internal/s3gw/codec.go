package s3gw

import (
	"encoding/binary"
	"errors"
)

// enc and dec are the little varint codec of the gateway's index records.
// A decoder never trusts a length: every string is bounded by maxField
// and by what is left of the input, so hostile or damaged bytes cost at
// most their own size.
type enc struct{ b []byte }

func (e *enc) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *enc) bytes(s []byte)   { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }

const maxField = 64 << 10

var errCorruptRecord = errors.New("s3gw: damaged index record")

type dec struct {
	b   []byte
	err error
}

func (d *dec) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errCorruptRecord
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errCorruptRecord
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) raw() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > maxField || n > uint64(len(d.b)) {
		d.err = errCorruptRecord
		return nil
	}
	s := d.b[:n:n]
	d.b = d.b[n:]
	return s
}

func (d *dec) str() string { return string(d.raw()) }

func (d *dec) bytes() []byte {
	r := d.raw()
	if len(r) == 0 {
		return nil
	}
	return append([]byte(nil), r...)
}

// count reads a count bounded by limit.
func (d *dec) count(limit int) int {
	n := d.uvarint()
	if n > uint64(limit) {
		d.err = errCorruptRecord
		return 0
	}
	return int(n)
}

func (d *dec) byte1() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.err = errCorruptRecord
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}
