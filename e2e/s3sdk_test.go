package e2e

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/minio/minio-go/v7"
	miniocreds "github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/cairn-storage/cairn/internal/devcluster"
)

// minio-go and the AWS SDK for Go (its transfer manager too), each set up
// as its documentation says, against the gateway.

// caTransport is an HTTP transport that trusts caFile ("": the system's).
func caTransport(t *testing.T, caFile string) *http.Transport {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(readFile(t, caFile)) {
			t.Fatalf("no certificate in %s", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	return tr
}

// objKeys lists a bucket's keys under prefix, and its common prefixes as
// "P:" + prefix, sorted.
func objKeys(keys, prefixes []string) string {
	var all []string
	all = append(all, keys...)
	for _, p := range prefixes {
		all = append(all, "P:"+p)
	}
	sort.Strings(all)
	return strings.Join(all, " ")
}

// minioSession: minio-go puts a small object and a 17 MiB one from a
// stream of unknown length (its multipart upload, 5 MiB parts), gets both
// whole and a range, lists with and without its delimiter, writes with
// its If-Match and If-None-Match options, copies, presigns a GET, removes
// objects in one DeleteObjects and the bucket.
func minioSession(t *testing.T, info devcluster.S3Info) {
	caFile, bucket := info.CAFile, bucketFor(info, "minio")
	ctx := context.Background()
	host, secure := strings.TrimPrefix(info.Endpoint, "http://"), false
	if strings.HasPrefix(info.Endpoint, "https://") {
		host, secure = strings.TrimPrefix(info.Endpoint, "https://"), true
	}
	mc, err := minio.New(host, &minio.Options{Creds: miniocreds.NewStaticV4(info.AccessKey, info.SecretKey, ""),
		Secure: secure, Transport: caTransport(t, caFile), Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := mc.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	big := randomBytes(17<<20 + 3)
	up, err := mc.PutObject(ctx, bucket, "dir/big", io.MultiReader(bytes.NewReader(big)), -1, minio.PutObjectOptions{PartSize: 5 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(up.ETag, "-4") {
		t.Errorf("the 17 MiB upload's ETag %q: want one of 4 parts", up.ETag)
	}
	small := []byte("small object")
	if _, err := mc.PutObject(ctx, bucket, "dir/sub/small", bytes.NewReader(small), int64(len(small)),
		minio.PutObjectOptions{ContentType: "text/plain", UserMetadata: map[string]string{"Colour": "blue"}}); err != nil {
		t.Fatal(err)
	}
	get := func(key string, opts minio.GetObjectOptions) []byte {
		t.Helper()
		o, err := mc.GetObject(ctx, bucket, key, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		b, err := io.ReadAll(o)
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		return b
	}
	if !bytes.Equal(get("dir/big", minio.GetObjectOptions{}), big) {
		t.Error("minio-go got the 17 MiB object back different")
	}
	var rg minio.GetObjectOptions
	rg.SetRange(5<<20-10, 5<<20+9)
	if !bytes.Equal(get("dir/big", rg), big[5<<20-10:5<<20+10]) {
		t.Error("a range across a part boundary differs")
	}
	st, err := mc.StatObject(ctx, bucket, "dir/sub/small", minio.StatObjectOptions{})
	if err != nil || st.ContentType != "text/plain" || st.UserMetadata["Colour"] != "blue" || st.Size != int64(len(small)) {
		t.Errorf("stat: %+v %v", st, err)
	}
	list := func(prefix string, recursive bool) string {
		var keys, prefixes []string
		for o := range mc.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: recursive}) {
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			if strings.HasSuffix(o.Key, "/") && o.Size == 0 && o.ETag == "" {
				prefixes = append(prefixes, o.Key)
			} else {
				keys = append(keys, o.Key)
			}
		}
		return objKeys(keys, prefixes)
	}
	if got := list("dir/", false); got != "P:dir/sub/ dir/big" {
		t.Errorf("ListObjects dir/ with delimiter: %q", got)
	}
	if got := list("", true); got != "dir/big dir/sub/small" {
		t.Errorf("ListObjects recursive: %q", got)
	}
	// Conditional writes.
	put := func(key string, cond func(*minio.PutObjectOptions)) (minio.UploadInfo, error) {
		var o minio.PutObjectOptions
		cond(&o)
		return mc.PutObject(ctx, bucket, key, strings.NewReader(key), int64(len(key)), o)
	}
	isPrecondition := func(err error) bool {
		return minio.ToErrorResponse(err).Code == "PreconditionFailed"
	}
	if _, err := put("dir/sub/small", func(o *minio.PutObjectOptions) { o.SetMatchETagExcept("*") }); !isPrecondition(err) {
		t.Errorf("If-None-Match * on an existing key: %v", err)
	}
	created, err := put("once", func(o *minio.PutObjectOptions) { o.SetMatchETagExcept("*") })
	if err != nil {
		t.Fatalf("If-None-Match * on a new key: %v", err)
	}
	if _, err := put("once", func(o *minio.PutObjectOptions) { o.SetMatchETag(strings.Repeat("0", 32)) }); !isPrecondition(err) {
		t.Errorf("If-Match of another ETag: %v", err)
	}
	if _, err := put("once", func(o *minio.PutObjectOptions) { o.SetMatchETag(created.ETag) }); err != nil {
		t.Errorf("If-Match of the current ETag: %v", err)
	}
	// ComposeObject: UploadPartCopy of a range of one object and the
	// whole of another.
	_, err = mc.ComposeObject(ctx, minio.CopyDestOptions{Bucket: bucket, Object: "composed"},
		minio.CopySrcOptions{Bucket: bucket, Object: "dir/big", MatchRange: true, Start: 1, End: 5 << 20},
		minio.CopySrcOptions{Bucket: bucket, Object: "dir/big"})
	if err != nil {
		t.Fatal(err)
	}
	if got := get("composed", minio.GetObjectOptions{}); !bytes.Equal(got, append(append([]byte{}, big[1:5<<20+1]...), big...)) {
		t.Errorf("ComposeObject: %d bytes, not the ranges it named", len(got))
	}
	// Copy, presign, remove.
	if _, err := mc.CopyObject(ctx, minio.CopyDestOptions{Bucket: bucket, Object: "copy"}, minio.CopySrcOptions{Bucket: bucket, Object: "dir/big"}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(get("copy", minio.GetObjectOptions{}), big) {
		t.Error("the copy differs")
	}
	u, err := mc.PresignedGetObject(ctx, bucket, "dir/sub/small", 300e9, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: caTransport(t, caFile)}).Get(u.String())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(b, small) {
		t.Errorf("presigned GET %s: %s %q", u, resp.Status, b)
	}
	objs := make(chan minio.ObjectInfo, 8)
	for _, k := range []string{"dir/big", "dir/sub/small", "once", "copy", "composed"} {
		objs <- minio.ObjectInfo{Key: k}
	}
	close(objs)
	for e := range mc.RemoveObjects(ctx, bucket, objs, minio.RemoveObjectsOptions{}) {
		t.Errorf("RemoveObjects %s: %v", e.ObjectName, e.Err)
	}
	if err := mc.RemoveBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
}

// sdkSession: the AWS SDK for Go from config.LoadDefaultConfig: its
// transfer manager uploads 21 MiB from a stream (5 MiB parts, 3 at once)
// and downloads it in ranged parts; GetObject of one part; ListObjectsV2 with a delimiter;
// PutObject with If-None-Match and If-Match.
func sdkSession(t *testing.T, info devcluster.S3Info) {
	caFile := info.CAFile
	ctx := context.Background()
	opts := []func(*config.LoadOptions) error{config.WithRegion("us-east-1"),
		config.WithSharedConfigFiles([]string{}), config.WithSharedCredentialsFiles([]string{}),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(info.AccessKey, info.SecretKey, ""))}
	if caFile != "" {
		opts = append(opts, config.WithCustomCABundle(bytes.NewReader(readFile(t, caFile))))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	cl := s3.NewFromConfig(cfg, func(o *s3.Options) { o.BaseEndpoint = aws.String(info.Endpoint); o.UsePathStyle = true })
	bucket := aws.String(bucketFor(info, "sdk"))
	if _, err := cl.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: bucket}); err != nil {
		t.Fatal(err)
	}
	big := randomBytes(21<<20 + 1)
	up, err := manager.NewUploader(cl, func(u *manager.Uploader) { u.PartSize = 5 << 20; u.Concurrency = 3 }).Upload(ctx,
		&s3.PutObjectInput{Bucket: bucket, Key: aws.String("a/big"), Body: io.MultiReader(bytes.NewReader(big))})
	if err != nil {
		t.Fatal(err)
	}
	if up.ETag == nil || !strings.HasSuffix(*up.ETag, `-5"`) {
		t.Errorf("the upload manager's ETag %v: want one of 5 parts", aws.ToString(up.ETag))
	}
	buf := manager.NewWriteAtBuffer(nil)
	n, err := manager.NewDownloader(cl, func(d *manager.Downloader) { d.PartSize = 5 << 20; d.Concurrency = 3 }).Download(ctx, buf,
		&s3.GetObjectInput{Bucket: bucket, Key: aws.String("a/big")})
	if err != nil || n != int64(len(big)) || !bytes.Equal(buf.Bytes(), big) {
		t.Errorf("the download manager: %d bytes, %v, equal %v", n, err, bytes.Equal(buf.Bytes(), big))
	}
	part, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: bucket, Key: aws.String("a/big"), PartNumber: aws.Int32(2)})
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := io.ReadAll(part.Body)
	part.Body.Close()
	if !bytes.Equal(pb, big[5<<20:10<<20]) || aws.ToInt32(part.PartsCount) != 5 {
		t.Errorf("GetObject part 2: %d bytes (equal %v), parts count %d", len(pb), bytes.Equal(pb, big[5<<20:10<<20]), aws.ToInt32(part.PartsCount))
	}
	for _, k := range []string{"a/b/c", "a/b/d", "a/e", "f"} {
		if _, err := cl.PutObject(ctx, &s3.PutObjectInput{Bucket: bucket, Key: aws.String(k), Body: strings.NewReader(k)}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := cl.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: bucket, Prefix: aws.String("a/"), Delimiter: aws.String("/")})
	if err != nil {
		t.Fatal(err)
	}
	var keys, prefixes []string
	for _, o := range l.Contents {
		keys = append(keys, *o.Key)
	}
	for _, p := range l.CommonPrefixes {
		prefixes = append(prefixes, *p.Prefix)
	}
	if got := objKeys(keys, prefixes); got != "P:a/b/ a/big a/e" {
		t.Errorf("ListObjectsV2 a/ with delimiter /: %q", got)
	}
	isPrecondition := func(err error) bool {
		var ae smithy.APIError
		return errors.As(err, &ae) && ae.ErrorCode() == "PreconditionFailed"
	}
	putIf := func(key, body string, ifMatch, ifNoneMatch *string) (*s3.PutObjectOutput, error) {
		return cl.PutObject(ctx, &s3.PutObjectInput{Bucket: bucket, Key: aws.String(key), Body: strings.NewReader(body), IfMatch: ifMatch, IfNoneMatch: ifNoneMatch})
	}
	if _, err := putIf("f", "x", nil, aws.String("*")); !isPrecondition(err) {
		t.Errorf("If-None-Match * on an existing key: %v", err)
	}
	first, err := putIf("new", "one", nil, aws.String("*"))
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum([]byte("one"))
	if aws.ToString(first.ETag) != `"`+hex.EncodeToString(sum[:])+`"` {
		t.Errorf("ETag %s, want the MD5 of the body", aws.ToString(first.ETag))
	}
	if _, err := putIf("new", "two", aws.String(`"0123"`), nil); !isPrecondition(err) {
		t.Errorf("If-Match of another ETag: %v", err)
	}
	if _, err := putIf("new", "two", first.ETag, nil); err != nil {
		t.Errorf("If-Match of the current ETag: %v", err)
	}
	if _, err := putIf("new", "three", first.ETag, nil); !isPrecondition(err) {
		t.Errorf("If-Match of the ETag it had before: %v", err)
	}
	sdkCompleteIfNoneMatch(t, cl, *bucket)
	got, err := cl.GetObject(ctx, &s3.GetObjectInput{Bucket: bucket, Key: aws.String("new")})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(got.Body)
	got.Body.Close()
	if string(b) != "two" {
		t.Errorf("after the conditional writes the object holds %q, want \"two\"", b)
	}
}

// sdkCompleteIfNoneMatch: a multipart upload with CRC32 checksums whose
// CompleteMultipartUpload carries If-None-Match: * fails on a key that
// exists (412, the upload stays open) and succeeds on a new one, and the
// object then has the composite CRC32 of its parts.
func sdkCompleteIfNoneMatch(t *testing.T, cl *s3.Client, bucket string) {
	ctx := context.Background()
	data := randomBytes(5<<20 + 100)
	upload := func(key string) (*s3.CreateMultipartUploadOutput, []types.CompletedPart) {
		up, err := cl.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32})
		if err != nil {
			t.Fatal(err)
		}
		var parts []types.CompletedPart
		for i, p := range [][]byte{data[:5<<20], data[5<<20:]} {
			out, err := cl.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: up.UploadId,
				PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(p), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32})
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: out.ETag, ChecksumCRC32: out.ChecksumCRC32})
		}
		return up, parts
	}
	complete := func(key string, up *s3.CreateMultipartUploadOutput, parts []types.CompletedPart) error {
		_, err := cl.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: up.UploadId,
			IfNoneMatch: aws.String("*"), MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
		return err
	}
	up, parts := upload("f")
	var ae smithy.APIError
	if err := complete("f", up, parts); !errors.As(err, &ae) || ae.ErrorCode() != "PreconditionFailed" {
		t.Errorf("CompleteMultipartUpload If-None-Match * on an existing key: %v", err)
	}
	cl.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String("f"), UploadId: up.UploadId})
	up, parts = upload("mp")
	if err := complete("mp", up, parts); err != nil {
		t.Fatalf("CompleteMultipartUpload If-None-Match * on a new key: %v", err)
	}
	h, err := cl.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String("mp"), ChecksumMode: types.ChecksumModeEnabled})
	if err != nil || !strings.HasSuffix(aws.ToString(h.ChecksumCRC32), "-2") {
		t.Errorf("HEAD of the completed upload: CRC32 %q (want a composite of 2 parts), %v", aws.ToString(h.ChecksumCRC32), err)
	}
}
