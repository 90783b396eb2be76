package s3gw

import (
	"bytes"
	"context"
	"crypto/md5"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairn-storage/cairn/internal/s3/checksum"
)

func countData(st *MemStore) int {
	n := 0
	for _, o := range st.Objects() {
		if strings.HasPrefix(o, "s3d.") {
			n++
		}
	}
	return n
}

func TestMultipart(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	c := env.alice
	env.mkBucket(c, "mpu")
	cr, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("mpu"), Key: aws.String("big"),
		ContentType: aws.String("video/mp4"), Metadata: map[string]string{"m": "1"}, ChecksumAlgorithm: types.ChecksumAlgorithmCrc32})
	if err != nil {
		t.Fatal(err)
	}
	id := cr.UploadId
	p1, p2 := randBytes(minPartSize, 1), randBytes(1234, 2)
	var etags []string
	var md5s [][]byte
	for i, p := range [][]byte{p1, p2, []byte("left out")} {
		out, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("mpu"), Key: aws.String("big"), UploadId: id,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(p), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32})
		if err != nil {
			t.Fatal(err)
		}
		etags = append(etags, *out.ETag)
		s := md5.Sum(p)
		md5s = append(md5s, s[:])
	}
	dataBefore := countData(env.store)
	lp, err := c.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String("mpu"), Key: aws.String("big"), UploadId: id})
	if err != nil || len(lp.Parts) != 3 || *lp.Parts[1].Size != 1234 || *lp.Parts[0].ETag != etags[0] {
		t.Fatalf("ListParts: %+v %v", lp, err)
	}
	lu, err := c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String("mpu")})
	if err != nil || len(lu.Uploads) != 1 || *lu.Uploads[0].UploadId != *id || *lu.Uploads[0].Key != "big" {
		t.Fatalf("ListMultipartUploads: %+v %v", lu, err)
	}
	complete := func(parts ...int) (*s3.CompleteMultipartUploadOutput, error) {
		var cp []types.CompletedPart
		for _, n := range parts {
			cp = append(cp, types.CompletedPart{PartNumber: aws.Int32(int32(n)), ETag: aws.String(etags[n-1])})
		}
		return c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpu"), Key: aws.String("big"),
			UploadId: id, MultipartUpload: &types.CompletedMultipartUpload{Parts: cp}})
	}
	_, err = complete(2, 3)
	wantCode(t, "complete with a small first part", err, "EntityTooSmall")
	_, err = c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("mpu"), Key: aws.String("big"), UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: aws.String(`"0123"`)}}}})
	wantCode(t, "complete with a wrong ETag", err, "InvalidPart")
	resp, body := env.raw("POST", "/mpu/big?uploadId="+*id, nil, []byte("<CompleteMultipartUpload><Part><PartNumber>2</PartNumber><ETag>x</ETag></Part><Part><PartNumber>1</PartNumber><ETag>y</ETag></Part></CompleteMultipartUpload>"))
	if resp.StatusCode != 400 || !strings.Contains(string(body), "InvalidPartOrder") {
		t.Fatalf("parts out of order: %d %s", resp.StatusCode, body)
	}
	out, err := complete(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"` + checksum.MultipartETag(md5s[:2]) + `"`; *out.ETag != want {
		t.Fatalf("multipart ETag %s, want %s", *out.ETag, want)
	}
	if countData(env.store) != dataBefore {
		t.Fatalf("complete copied data: %d data objects before, %d after", dataBefore, countData(env.store))
	}
	again, err := complete(1, 2)
	if err != nil || *again.ETag != *out.ETag {
		t.Fatalf("a repeated complete: %+v %v", again, err)
	}
	got, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("mpu"), Key: aws.String("big"), ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		t.Fatal(err)
	}
	b := new(bytes.Buffer)
	b.ReadFrom(got.Body)
	if !bytes.Equal(b.Bytes(), append(append([]byte{}, p1...), p2...)) || *got.ContentType != "video/mp4" || got.Metadata["m"] != "1" {
		t.Fatalf("GET of the completed object: %d bytes, %s %v", b.Len(), *got.ContentType, got.Metadata)
	}
	if got.ChecksumCRC32 == nil || !strings.HasSuffix(*got.ChecksumCRC32, "-2") {
		t.Fatalf("composite CRC32: %v", got.ChecksumCRC32)
	}
	_, err = c.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String("mpu"), Key: aws.String("big"), UploadId: id})
	wantCode(t, "ListParts after complete", err, "NoSuchUpload")
	// The left-out part 3 goes to the collector with the grace.
	env.clock.offset += 2 * env.gw.cfg.GCGrace
	if _, err := env.gw.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countData(env.store); n != 3 {
		t.Fatalf("%d data objects after collecting the left-out part, want 3 (5 MiB in 2 stripes + 1234 bytes)", n)
	}
}

func TestMultipartAbort(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	c := env.alice
	env.mkBucket(c, "mpu")
	cr, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("mpu"), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if _, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("mpu"), Key: aws.String("k"), UploadId: cr.UploadId,
			PartNumber: aws.Int32(int32(i)), Body: strings.NewReader(fmt.Sprint("part", i))}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("mpu"), Key: aws.String("k"), UploadId: aws.String("nope"),
		PartNumber: aws.Int32(1), Body: strings.NewReader("x")})
	wantCode(t, "part of an unknown upload", err, "NoSuchUpload")
	if _, err := c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String("mpu"), Key: aws.String("k"), UploadId: cr.UploadId}); err != nil {
		t.Fatal(err)
	}
	_, err = c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String("mpu"), Key: aws.String("k"), UploadId: cr.UploadId})
	wantCode(t, "abort twice", err, "NoSuchUpload")
	env.clock.offset += 2 * env.gw.cfg.GCGrace
	if _, err := env.gw.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countData(env.store); n != 0 {
		t.Fatalf("%d data objects after an abort and the grace", n)
	}
}

func FuzzCompleteXML(f *testing.F) {
	f.Add([]byte("<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\"a\"</ETag></Part></CompleteMultipartUpload>"))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := parseComplete(b)
		if err != nil {
			return
		}
		for i, p := range req.Parts {
			if p.PartNumber < 1 || p.PartNumber > maxPartNum || i > 0 && p.PartNumber <= req.Parts[i-1].PartNumber {
				t.Fatalf("accepted parts %+v", req.Parts)
			}
		}
	})
}

// UploadPartCopy (aws-cli copies large objects between buckets with it):
// ranges of a source become parts.
func TestUploadPartCopy(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	c := env.alice
	env.mkBucket(c, "srcb")
	env.mkBucket(c, "dstb")
	data := randBytes(minPartSize+777, 9)
	env.put("srcb", "obj", data)
	cr, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("dstb"), Key: aws.String("copy")})
	if err != nil {
		t.Fatal(err)
	}
	var parts []types.CompletedPart
	for i, rng := range []string{fmt.Sprintf("bytes=0-%d", minPartSize-1), fmt.Sprintf("bytes=%d-%d", minPartSize, len(data)-1)} {
		out, err := c.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: aws.String("dstb"), Key: aws.String("copy"), UploadId: cr.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), CopySource: aws.String("srcb/obj"), CopySourceRange: aws.String(rng)})
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: out.CopyPartResult.ETag})
	}
	_, err = c.UploadPartCopy(ctx, &s3.UploadPartCopyInput{Bucket: aws.String("dstb"), Key: aws.String("copy"), UploadId: cr.UploadId,
		PartNumber: aws.Int32(3), CopySource: aws.String("srcb/obj"), CopySourceRange: aws.String("bytes=5-99999999999")})
	wantCode(t, "a copy range past the source's end", err, "InvalidArgument")
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("dstb"), Key: aws.String("copy"),
		UploadId: cr.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}); err != nil {
		t.Fatal(err)
	}
	if got := env.get("dstb", "copy"); !bytes.Equal(got, data) {
		t.Fatalf("object made of copied parts differs (%d bytes)", len(got))
	}
}

// GET and HEAD with partNumber serve one part of a multipart upload as a
// ranged GET (206, Content-Range, the part count), part 1 of a plain
// object is all of it, and a part past the last is InvalidPartNumber.
// The AWS SDK for Go's newer transfer manager downloads by part; this was
// NotImplemented before.
func TestGetObjectPartNumber(t *testing.T) {
	env := newEnv(t)
	c, ctx := env.alice, context.Background()
	env.mkBucket(c, "parts")
	data := randBytes(10<<20+1000, 7)
	cr, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("parts"), Key: aws.String("mp")})
	if err != nil {
		t.Fatal(err)
	}
	bounds := []int{0, 5 << 20, 10 << 20, len(data)}
	var done []types.CompletedPart
	for i := 0; i < 3; i++ {
		out, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("parts"), Key: aws.String("mp"), UploadId: cr.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(data[bounds[i]:bounds[i+1]])})
		if err != nil {
			t.Fatal(err)
		}
		done = append(done, types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: out.ETag})
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("parts"), Key: aws.String("mp"), UploadId: cr.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: done}}); err != nil {
		t.Fatal(err)
	}
	env.put("parts", "plain", []byte("plain object"))
	for _, tc := range []struct {
		key        string
		part       int32
		start, end int // of data, or of "plain object"
	}{{"mp", 1, bounds[0], bounds[1]}, {"mp", 2, bounds[1], bounds[2]}, {"mp", 3, bounds[2], bounds[3]}, {"plain", 1, 0, 12}} {
		src, size, count := data, len(data), int32(3)
		if tc.key == "plain" {
			src, size, count = []byte("plain object"), 12, 1
		}
		got, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("parts"), Key: aws.String(tc.key), PartNumber: aws.Int32(tc.part)})
		if err != nil {
			t.Fatalf("GET %s part %d: %v", tc.key, tc.part, err)
		}
		b, _ := io.ReadAll(got.Body)
		got.Body.Close()
		wantRange := fmt.Sprintf("bytes %d-%d/%d", tc.start, tc.end-1, size)
		if !bytes.Equal(b, src[tc.start:tc.end]) || aws.ToString(got.ContentRange) != wantRange || aws.ToInt32(got.PartsCount) != count {
			t.Errorf("GET %s part %d: %d bytes (equal %v), Content-Range %q (want %q), parts count %d (want %d)", tc.key, tc.part,
				len(b), bytes.Equal(b, src[tc.start:tc.end]), aws.ToString(got.ContentRange), wantRange, aws.ToInt32(got.PartsCount), count)
		}
		h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("parts"), Key: aws.String(tc.key), PartNumber: aws.Int32(tc.part)})
		if err != nil || aws.ToInt64(h.ContentLength) != int64(tc.end-tc.start) || aws.ToInt32(h.PartsCount) != count {
			t.Errorf("HEAD %s part %d: %v %v", tc.key, tc.part, h, err)
		}
	}
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("parts"), Key: aws.String("mp"), PartNumber: aws.Int32(4)})
	wantCode(t, "GET of part 4 of 3", err, "InvalidPartNumber")
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("parts"), Key: aws.String("plain"), PartNumber: aws.Int32(2)})
	wantCode(t, "GET of part 2 of a plain object", err, "InvalidPartNumber")
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("parts"), Key: aws.String("mp"), PartNumber: aws.Int32(1), Range: aws.String("bytes=0-9")})
	wantCode(t, "GET with partNumber and Range", err, "InvalidRequest")
}
