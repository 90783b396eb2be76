package objstore

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

func sampleTxn() *Txn {
	var tx Txn
	tx.Write("1.2a", "obj", 4096, []byte("data"))
	tx.Put("1.2a", "p", []byte{0, 1, 2})
	tx.Truncate("1.2a", "obj", 1<<20)
	tx.Create("c", "n\x00")
	tx.Delete("c", "gone")
	tx.SetXattr("c", "n", "user.a", []byte("v"))
	tx.RmXattr("c", "n", "user.b")
	tx.OmapSet("c", "n", []byte("k"), []byte("v"))
	tx.OmapRm("c", "n", []byte("k"))
	tx.OmapRmRange("c", "n", []byte("a"), []byte("z"))
	tx.OmapRmRange("c", "n", nil, nil)
	tx.OmapRmRange("c", "n", []byte("a"), []byte{})
	return &tx
}

func TestTxnMarshalRoundTrip(t *testing.T) {
	tx := sampleTxn()
	b := tx.Marshal()
	tx2, err := UnmarshalTxn(b)
	if err != nil {
		t.Fatal(err)
	}
	if tx2.Len() != tx.Len() || !bytes.Equal(tx2.Marshal(), b) {
		t.Fatal("round trip changed the encoding")
	}
	for i := 0; i < len(b); i++ {
		if _, err := UnmarshalTxn(b[:i]); err == nil {
			t.Fatalf("truncated encoding of %d bytes accepted", i)
		}
	}
	bad := append([]byte{}, b...)
	bad[3] = 99
	if _, err := UnmarshalTxn(bad); err == nil || !strings.Contains(err.Error(), "version 99") {
		t.Fatalf("unknown version: %v", err)
	}
	if _, err := UnmarshalTxn(append(b, 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
}

// bulkTxn writes data large enough to be aligned in the encoding.
func bulkTxn(lead int) *Txn {
	var tx Txn
	tx.SetXattr("1.2a", "obj", "v", bytes.Repeat([]byte{1}, lead))
	tx.Write("1.2a", "obj", 1<<20, bytes.Repeat([]byte{0xab}, txnAlignMin))
	tx.Put("1.2a", "p", bytes.Repeat([]byte{0xcd}, txnAlignMin+1))
	return &tx
}

// Large write data starts at an aligned offset of the encoding, whatever
// comes before it, and the padding is part of the one valid encoding.
func TestTxnBulkDataAligned(t *testing.T) {
	for _, lead := range []int{0, 1, 100, txnAlign - 30} {
		tx := bulkTxn(lead)
		b := tx.Marshal()
		if len(b) > tx.Size() {
			t.Fatalf("lead %d: encoding of %d bytes over Size %d", lead, len(b), tx.Size())
		}
		tx2, err := UnmarshalTxn(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range tx2.ops[1:] {
			if off := bytes.Index(b, o.data); off%txnAlign != 0 || len(o.data) < txnAlignMin {
				t.Fatalf("lead %d: %d bytes of data at offset %d", lead, len(o.data), off)
			}
		}
		if !bytes.Equal(tx2.Marshal(), b) {
			t.Fatalf("lead %d: round trip changed the encoding", lead)
		}
		// A sender learns where summed data lies in the encoding.
		sums := make([]uint32, txnAlignMin/blockSize)
		for i := range sums {
			sums[i] = blockCRC(tx.ops[1].data[i*blockSize : (i+1)*blockSize])
		}
		tx.ops[1].sums = sums
		// A sender gets the encoding in parts, any bulk data left where it
		// lies, the summed data with its sums.
		for _, ext := range []func([]byte) bool{
			nil,
			func([]byte) bool { return true },
			func(d []byte) bool { return &d[0] == &tx.ops[1].data[0] },
			func(d []byte) bool { return &d[0] == &tx.ops[2].data[0] },
		} {
			buf, parts := tx.AppendMarshalParts(make([]byte, lead), ext)
			var whole []byte
			external, summed := 0, 0
			for _, p := range parts {
				whole = append(whole, p.Bytes...)
				for _, o := range tx.ops[1:] {
					if &p.Bytes[0] == &o.data[0] {
						external += len(p.Bytes)
					}
				}
				if p.Sums != nil {
					summed++
					if !bytes.Equal(p.Bytes, tx.ops[1].data) {
						t.Fatalf("lead %d: sums on a part that is not the summed data", lead)
					}
				}
			}
			if !bytes.Equal(whole, b) || summed != 1 {
				t.Fatalf("lead %d: parts make the encoding: %v; %d summed parts", lead, bytes.Equal(whole, b), summed)
			}
			if len(buf) != lead+len(b)-external {
				t.Fatalf("lead %d: buffer of %d bytes holds external data (%d bytes, encoding %d)", lead, len(buf), external, len(b))
			}
		}

		// With the encoding's block checksums, aligned data gets its own.
		var encSums []uint32
		for i := 0; i+blockSize <= len(b); i += blockSize {
			encSums = append(encSums, blockCRC(b[i:i+blockSize]))
		}
		tx3, err := UnmarshalTxnSummed(b, encSums)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range tx3.ops {
			if i == 0 {
				if o.sums != nil {
					t.Fatalf("lead %d: an xattr got checksums", lead)
				}
				continue
			}
			if len(o.sums) != len(o.data)/blockSize {
				t.Fatalf("lead %d: op %d: %d checksums for %d bytes", lead, i, len(o.sums), len(o.data))
			}
			for k, sum := range o.sums {
				if sum != blockCRC(o.data[k*blockSize:(k+1)*blockSize]) {
					t.Fatalf("lead %d: op %d: block %d has the wrong checksum", lead, i, k)
				}
			}
		}
		bad := bytes.Clone(b)
		bad[bytes.Index(b, tx2.ops[1].data)-1] = 7 // the last padding byte
		if _, err := UnmarshalTxn(bad); err == nil || !strings.Contains(err.Error(), "padding") {
			t.Fatalf("lead %d: nonzero padding: %v", lead, err)
		}
	}
}

func FuzzUnmarshalTxn(f *testing.F) {
	f.Add(sampleTxn().Marshal())
	f.Add((&Txn{}).Marshal())
	f.Add([]byte("CTX\x02\x01\x01\x01a\x01b\x00\x00"))
	f.Add([]byte("CTX\x02\xff\xff\xff\xff\x0f"))
	f.Add(bulkTxn(0).Marshal())
	renames := &Txn{}
	renames.Rename("c", "a", "b")
	renames.Put("c", "a", []byte("x"))
	f.Add(renames.Marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		tx, err := UnmarshalTxn(b)
		if err != nil {
			return
		}
		if err := tx.Validate(); err != nil {
			t.Fatalf("decoded txn does not validate: %v", err)
		}
		if out := tx.Marshal(); !bytes.Equal(out, b) {
			t.Fatalf("Marshal(Unmarshal(b)) != b\n%x\n%x", b, out)
		}
	})
}

func FuzzDecodeObjRec(f *testing.F) {
	r := objRec{id: 7, size: 5000, mtime: 123, inline: true, data: make([]byte, 5000)}
	r.crcs = []uint32{inlineBlockCRC(r.data, 0), inlineBlockCRC(r.data, 1)}
	f.Add(r.encode())
	f.Add((&objRec{id: 9, size: 1 << 30, fileID: 12}).encode())
	f.Add((&objRec{id: 9, inline: true}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeObjRec(b)
		if err != nil {
			return
		}
		if !bytes.Equal(r.encode(), b) {
			t.Fatal("object record does not re-encode identically")
		}
		if r.inline && (uint64(len(r.data)) != r.size || uint64(len(r.crcs)) != nblocks(r.size)) {
			t.Fatal("inconsistent inline record accepted")
		}
	})
}

func FuzzDecodeChunk(f *testing.F) {
	c := &chunk{bits: 1<<0 | 1<<63}
	c.crc[0], c.crc[63] = 0xdeadbeef, 42
	f.Add(c.encode())
	f.Add((&chunk{}).encode())
	c.slotB = 1 << 63
	f.Add(c.encode())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeChunk(b)
		if err != nil {
			return
		}
		if !bytes.Equal(c.encode(), b) {
			t.Fatal("chunk does not re-encode identically")
		}
	})
}

func FuzzDecodeJournal(f *testing.F) {
	f.Add((&jrec{fileID: 3, off: 8192, data: make([]byte, 4096)}).encode())
	f.Add((&jrec{fileID: 3, off: slotBaseReal + 8192, data: make([]byte, 4096)}).encode())
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		j, err := decodeJrec(b)
		if err != nil {
			return
		}
		if !bytes.Equal(j.encode(), b) {
			t.Fatal("journal record does not re-encode identically")
		}
		if j.off%blockSize != 0 || len(j.data)%blockSize != 0 || !validJrecExtent(j.off, uint64(len(j.data))) {
			t.Fatal("bad extent accepted")
		}
	})
}

// FuzzKeyOrder checks that escaped names round-trip and sort like the names.
func FuzzKeyOrder(f *testing.F) {
	f.Add("a", "a\x00")
	f.Add("a\x00", "a\x01")
	f.Add("", "\x00")
	f.Add("1.0", "1.0\x00x")
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := objKey("c", a), objKey("c", b)
		if cmp := bytes.Compare(ka, kb); cmp != strings.Compare(a, b) {
			t.Fatalf("order of %q, %q not preserved", a, b)
		}
		coll, rest, ok := unesc(ka[1:])
		if !ok || coll != "c" {
			t.Fatal("collection does not decode")
		}
		name, rest, ok := unesc(rest)
		if !ok || name != a || len(rest) != 0 {
			t.Fatalf("name %q does not decode", a)
		}
		// A collection's objects never interleave with another collection's.
		if k := objKey(a, "x"); bytes.Compare(k, collPrefix(a)) < 0 || bytes.Compare(k, collEnd(a)) >= 0 {
			t.Fatal("object key outside its collection range")
		}
		if a != b {
			if k := objKey(b, "x"); bytes.Compare(k, collPrefix(a)) >= 0 && bytes.Compare(k, collEnd(a)) < 0 {
				t.Fatalf("object of %q inside range of %q", b, a)
			}
		}
		unesc([]byte(b)) // must not panic on arbitrary input
	})
}

// FuzzDecodeLogGroup: a group the decoder accepts re-encodes to the same
// bytes, and its records lie inside it.
func FuzzDecodeLogGroup(f *testing.F) {
	f.Add(encodeLogGroup(nil, 7, 3, 512, [][]byte{[]byte("batch one"), {}, make([]byte, 600)}))
	f.Add(encodeLogGroup(nil, 1, 1, 4096, nil))
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, tail, recs, n, err := decodeLogGroup(b)
		if err != nil {
			return
		}
		if n > len(b) || tail > seq {
			t.Fatalf("group of %d bytes in %d, tail %d > seq %d accepted", n, len(b), tail, seq)
		}
		align := binary.BigEndian.Uint32(b[28:])
		re := encodeLogGroup(nil, seq, tail, align, recs)
		if !bytes.Equal(re[:n], b[:n]) || len(re)%int(align) != 0 {
			t.Fatal("log group does not re-encode identically")
		}
	})
}
