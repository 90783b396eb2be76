package s3gw

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// TestObjectAttributes: GetObjectAttributes through the AWS SDK answers
// what was asked and nothing else, pages the parts of a multipart object
// with checksums, and refuses requests that ask for nothing or for an
// attribute S3 does not have.
func TestObjectAttributes(t *testing.T) {
	env := newEnv(t)
	ctx := context.Background()
	c := env.alice
	env.mkBucket(c, "attr")
	plain := env.put("attr", "plain", []byte("twelve bytes"))
	attrs := func(key string, marker, maxParts int32, which ...types.ObjectAttributes) *s3.GetObjectAttributesOutput {
		t.Helper()
		in := &s3.GetObjectAttributesInput{Bucket: aws.String("attr"), Key: aws.String(key), ObjectAttributes: which}
		if maxParts > 0 {
			in.MaxParts, in.PartNumberMarker = aws.Int32(maxParts), aws.String(string(rune('0'+marker)))
		}
		out, err := c.GetObjectAttributes(ctx, in)
		if err != nil {
			t.Fatalf("GetObjectAttributes %s %v: %v", key, which, err)
		}
		return out
	}
	out := attrs("plain", 0, 0, types.ObjectAttributesEtag, types.ObjectAttributesObjectSize)
	if *out.ETag != strings.Trim(*plain.ETag, `"`) || *out.ObjectSize != 12 || out.StorageClass != "" || out.ObjectParts != nil || out.LastModified == nil {
		t.Fatalf("plain object, ETag and size: %+v", out)
	}
	out = attrs("plain", 0, 0, types.ObjectAttributesStorageClass, types.ObjectAttributesObjectParts)
	if out.ETag != nil || out.StorageClass != types.StorageClassStandard || out.ObjectParts != nil {
		t.Fatalf("plain object, storage class and parts: %+v", out)
	}

	cr, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("attr"), Key: aws.String("mp"), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c})
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{minPartSize, minPartSize, 1000}
	var done []types.CompletedPart
	for i, n := range sizes {
		p, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("attr"), Key: aws.String("mp"), UploadId: cr.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(randBytes(n, uint64(i))), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c})
		if err != nil {
			t.Fatal(err)
		}
		done = append(done, types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: p.ETag, ChecksumCRC32C: p.ChecksumCRC32C})
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("attr"), Key: aws.String("mp"),
		UploadId: cr.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: done}}); err != nil {
		t.Fatal(err)
	}
	out = attrs("mp", 0, 2, types.ObjectAttributesChecksum, types.ObjectAttributesObjectParts)
	op := out.ObjectParts
	if out.Checksum == nil || out.Checksum.ChecksumCRC32C == nil || out.Checksum.ChecksumType != types.ChecksumTypeComposite {
		t.Fatalf("multipart object's checksum: %+v", out.Checksum)
	}
	if op == nil || *op.TotalPartsCount != 3 || len(op.Parts) != 2 || !*op.IsTruncated || *op.NextPartNumberMarker != "2" ||
		*op.Parts[1].Size != int64(minPartSize) || *op.Parts[0].ChecksumCRC32C != *done[0].ChecksumCRC32C {
		t.Fatalf("first page of parts: %+v", op)
	}
	op = attrs("mp", 2, 2, types.ObjectAttributesObjectParts).ObjectParts
	if len(op.Parts) != 1 || *op.Parts[0].PartNumber != 3 || *op.Parts[0].Size != 1000 || *op.IsTruncated {
		t.Fatalf("second page of parts: %+v", op)
	}

	resp, body := env.raw("GET", "/attr/plain?attributes", nil, nil)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "InvalidArgument") {
		t.Fatalf("no attributes asked for: %d %s", resp.StatusCode, body)
	}
	resp, body = env.raw("GET", "/attr/plain?attributes", map[string][]string{"X-Amz-Object-Attributes": {"ETag,Colour"}}, nil)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "Colour") {
		t.Fatalf("an unknown attribute: %d %s", resp.StatusCode, body)
	}
	_, err = env.bob.GetObjectAttributes(ctx, &s3.GetObjectAttributesInput{Bucket: aws.String("attr"), Key: aws.String("plain"),
		ObjectAttributes: []types.ObjectAttributes{types.ObjectAttributesEtag}})
	wantCode(t, "another user's bucket", err, "AccessDenied")
	_, err = c.GetObjectAttributes(ctx, &s3.GetObjectAttributesInput{Bucket: aws.String("attr"), Key: aws.String("nope"),
		ObjectAttributes: []types.ObjectAttributes{types.ObjectAttributesEtag}})
	wantCode(t, "a missing key", err, "NoSuchKey")
}
