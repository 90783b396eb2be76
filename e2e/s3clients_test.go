package e2e

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cairn-storage/cairn/internal/devcluster"
)

// Debian's rclone, restic and s3cmd against cairn dev's gateway, each with
// the settings its documentation gives for an S3 service of one's own.

// awkwardTree writes a tree of files with names S3 clients tend to get
// wrong (spaces, '+', '%', unicode, shell and URL metacharacters, deep
// directories) and sizes around 4 KiB boundaries, and one file of bigN
// bytes, large enough for the clients to upload in parts.
func awkwardTree(t *testing.T, dir string, bigN int) {
	t.Helper()
	files := map[string]int{
		"empty":                    0,
		"one byte":                 1,
		"a+b=c.txt":                4095,
		"100%.txt":                 4096,
		"percent%2Fslash":          4097,
		"ü/日本語/ファイル.txt":           1000,
		"dir/sub/deep/x/y/z.bin":   70000,
		"dir/with space/and'quote": 33,
		"dir/semi;colon,comma":     64,
		"dir/brackets[1](2){3}":    65,
		"dir/amp&dollar$at@":       66,
		"dir/tilde~hash#":          67,
		"dir/eq=excl!star*":        68,
		"big/multipart.bin":        bigN,
	}
	for name, n := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, randomBytes(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// sameTree fails unless dirs a and b hold the same regular files with the
// same bytes.
func sameTree(t *testing.T, a, b string) {
	t.Helper()
	read := func(root string) map[string][]byte {
		m := map[string][]byte{}
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			m[rel], err = os.ReadFile(p)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	ma, mb := read(a), read(b)
	for name, data := range ma {
		if got, ok := mb[name]; !ok {
			t.Errorf("%s lacks %q", b, name)
		} else if !bytes.Equal(got, data) {
			t.Errorf("%q differs: %d bytes in %s, %d in %s", name, len(data), a, len(got), b)
		}
	}
	for name := range mb {
		if _, ok := ma[name]; !ok {
			t.Errorf("%s has %q, %s does not", b, name, a)
		}
	}
}

// runEnv runs a client, failing the test with its output if it fails.
func runEnv(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestS3Clients runs the clients nobody here wrote against one cluster,
// over HTTPS to cairn dev --tls's gateway (trusting the CA it made) and
// over HTTP to a second gateway: rclone, restic, s3cmd and aws-cli as
// processes, minio-go and the AWS SDK for Go (with its transfer manager)
// from this test.
func TestS3Clients(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"rclone", "restic", "s3cmd"} {
		requireTool(t, tool, "apt-get install "+tool)
	}
	requireTool(t, "aws", "pip install awscli")
	c := startCluster(t, clusterOpts{s3: true, tls: true})
	tlsInfo := c.s3Info()
	httpInfo := tlsInfo
	httpInfo.Endpoint, httpInfo.CAFile = "http://"+startGateway(t, c), ""
	s3StatusLists(t, c, tlsInfo.Endpoint, httpInfo.Endpoint)
	for _, info := range []devcluster.S3Info{httpInfo, tlsInfo} {
		for _, tc := range []struct {
			name string
			run  func(*testing.T, devcluster.S3Info)
		}{
			{"rclone", rcloneSession},
			{"restic", resticSession},
			{"s3cmd", s3cmdSession},
			{"aws-cli", awsSession},
			{"minio-go", minioSession},
			{"aws-sdk-go-v2", sdkSession},
		} {
			ok := t.Run(scheme(info)+"/"+tc.name, func(t *testing.T) {
				start := time.Now()
				tc.run(t, info)
				t.Logf("%.1f s", time.Since(start).Seconds())
			})
			if !ok {
				t.Logf("cluster logs:\n%s", c.logs())
			}
		}
	}
}

// s3StatusLists fails unless cairn status lists exactly the gateways of
// endpoints (waiting a little for the last one to register).
func s3StatusLists(t *testing.T, c *cluster, endpoints ...string) {
	t.Helper()
	sort.Strings(endpoints)
	var got []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		out, err := c.cli(nil, "status", "--json")
		var st struct {
			Gateways []struct{ Kind, Endpoint, Pool string }
		}
		if err != nil || json.Unmarshal(out, &st) != nil {
			t.Fatalf("cairn status --json: %v\n%s", err, out)
		}
		got = got[:0]
		for _, g := range st.Gateways {
			if g.Kind != "s3" || g.Pool != "s3" {
				t.Fatalf("cairn status lists %+v", g)
			}
			got = append(got, g.Endpoint)
		}
		sort.Strings(got)
		if slices.Equal(got, endpoints) {
			break
		}
	}
	if !slices.Equal(got, endpoints) {
		t.Fatalf("cairn status lists the gateways %q, want %q", got, endpoints)
	}
	if out, err := c.cli(nil, "status"); err != nil || !strings.Contains(string(out), "gateways:") || !strings.Contains(string(out), endpoints[0]) {
		t.Fatalf("cairn status: %v\n%s", err, out)
	}
}

// scheme is "http" or "https", as info's endpoint says.
func scheme(info devcluster.S3Info) string {
	s, _, _ := strings.Cut(info.Endpoint, "://")
	return s
}

// bucketFor names a client's bucket for one endpoint, so that the runs
// over HTTP and HTTPS use buckets of their own.
func bucketFor(info devcluster.S3Info, client string) string {
	return client + "-" + scheme(info)
}

// awsSession: aws-cli cp of a 12 MiB file (in parts) and back, sync of the
// awkward tree both ways, rm --recursive and rb.
func awsSession(t *testing.T, info devcluster.S3Info) {
	work := t.TempDir()
	src, back := filepath.Join(work, "src"), filepath.Join(work, "back")
	awkwardTree(t, src, 12<<20+1)
	b := "s3://" + bucketFor(info, "awscli")
	mustAWS(t, info, work, "s3", "mb", b)
	mustAWS(t, info, work, "s3", "cp", "--only-show-errors", filepath.Join(src, "big/multipart.bin"), b+"/one/big")
	mustAWS(t, info, work, "s3", "cp", "--only-show-errors", b+"/one/big", filepath.Join(work, "big.back"))
	if !bytes.Equal(readFile(t, filepath.Join(work, "big.back")), readFile(t, filepath.Join(src, "big/multipart.bin"))) {
		t.Error("aws s3 cp: the 12 MiB object came back different")
	}
	awsAttributes(t, info, work, bucketFor(info, "awscli"), "one/big", 12<<20+1)
	mustAWS(t, info, work, "s3", "sync", "--only-show-errors", src, b+"/tree")
	mustAWS(t, info, work, "s3", "sync", "--only-show-errors", b+"/tree", back)
	sameTree(t, src, back)
	mustAWS(t, info, work, "s3", "rm", "--only-show-errors", "--recursive", b)
	mustAWS(t, info, work, "s3", "rb", b)
}

// awsAttributes checks what aws s3api get-object-attributes says of a
// multipart object of size bytes that aws s3 cp uploaded in 8 MiB parts.
func awsAttributes(t *testing.T, info devcluster.S3Info, work, bucket, key string, size int64) {
	t.Helper()
	out := mustAWS(t, info, work, "s3api", "get-object-attributes", "--bucket", bucket, "--key", key,
		"--object-attributes", "ETag", "ObjectSize", "ObjectParts", "StorageClass")
	var got struct {
		ETag         string
		ObjectSize   int64
		StorageClass string
		ObjectParts  struct{ TotalPartsCount int }
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("get-object-attributes: %v\n%s", err, out)
	}
	parts := int((size + 8<<20 - 1) / (8 << 20))
	if got.ObjectSize != size || got.ObjectParts.TotalPartsCount != parts || got.StorageClass != "STANDARD" ||
		!strings.HasSuffix(got.ETag, fmt.Sprintf("-%d", parts)) {
		t.Errorf("get-object-attributes of a %d-byte object in %d parts: %s", size, parts, out)
	}
}

// rcloneSession: rclone sync to a bucket and back, check both ways, then
// a changed tree synced again (new, changed and deleted files). Parts of
// 5 MiB from 5 MiB on, so the 12 MiB file goes up in 3 parts.
func rcloneSession(t *testing.T, info devcluster.S3Info) {
	work := t.TempDir()
	conf := filepath.Join(work, "rclone.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("[cairn]\ntype = s3\nprovider = Other\naccess_key_id = %s\nsecret_access_key = %s\nendpoint = %s\n",
		info.AccessKey, info.SecretKey, info.Endpoint)), 0o600)
	src, back := filepath.Join(work, "src"), filepath.Join(work, "back")
	awkwardTree(t, src, 12<<20+777)
	// rclone refuses to start when AWS_CA_BUNDLE is set: it takes its CA
	// from --ca-cert.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_CA_BUNDLE=") {
			env = append(env, kv)
		}
	}
	rc := func(args ...string) string {
		t.Helper()
		args = append([]string{"--config", conf, "--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M", "--retries", "1", "--low-level-retries", "1"}, args...)
		if info.CAFile != "" {
			args = append([]string{"--ca-cert", info.CAFile}, args...)
		}
		return runEnv(t, env, "rclone", args...)
	}
	r := "cairn:" + bucketFor(info, "rclone")
	rc("mkdir", r)
	rc("sync", src, r+"/tree")
	rc("check", src, r+"/tree")
	rc("sync", r+"/tree", back)
	rc("check", r+"/tree", back)
	sameTree(t, src, back)
	// Change the tree: a new file, a changed one, a removed one.
	os.WriteFile(filepath.Join(src, "dir/new file"), []byte("new"), 0o644)
	os.WriteFile(filepath.Join(src, "a+b=c.txt"), randomBytes(5000), 0o644)
	os.Remove(filepath.Join(src, "dir/semi;colon,comma"))
	rc("sync", src, r+"/tree")
	rc("check", src, r+"/tree")
	rc("sync", r+"/tree", back)
	sameTree(t, src, back)
	if out := rc("lsf", r+"/tree/dir/"); !strings.Contains(out, "with space/") || strings.Contains(out, "semi;colon") {
		t.Errorf("rclone lsf of a directory:\n%s", out)
	}
	// A server-side copy, a move, and the MD5 rclone keeps for an object
	// it uploaded in parts.
	rc("copyto", r+"/tree/big/multipart.bin", r+"/copy.bin")
	rc("moveto", r+"/copy.bin", r+"/moved.bin")
	rc("check", "--download", filepath.Join(src, "big"), r+"/tree/big")
	sum := md5.Sum(readFile(t, filepath.Join(src, "big/multipart.bin")))
	if out := rc("md5sum", r+"/moved.bin"); !strings.HasPrefix(out, hex.EncodeToString(sum[:])+" ") {
		t.Errorf("rclone md5sum of the moved copy: %q, want %x", out, sum)
	}
	if out := rc("lsf", r+"/"); strings.Contains(out, "copy.bin") || !strings.Contains(out, "moved.bin") {
		t.Errorf("rclone lsf after moveto:\n%s", out)
	}
	if out := rc("purge", r); strings.Contains(out, "ERROR") {
		t.Errorf("rclone purge: %s", out)
	}
}

// resticSession: restic init, backup, a second backup of a changed tree,
// check --read-data, forget --keep-last 1 and prune, restore, and the
// restored tree equal byte for byte to the source.
func resticSession(t *testing.T, info devcluster.S3Info) {
	work := t.TempDir()
	src, restored := filepath.Join(work, "src"), filepath.Join(work, "restored")
	awkwardTree(t, src, 9<<20)
	env := append(s3Env(info), "RESTIC_REPOSITORY=s3:"+info.Endpoint+"/"+bucketFor(info, "restic"), "RESTIC_PASSWORD=correct horse",
		"RESTIC_CACHE_DIR="+filepath.Join(work, "cache"))
	rs := func(args ...string) string {
		t.Helper()
		if info.CAFile != "" {
			args = append([]string{"--cacert", info.CAFile}, args...)
		}
		return runEnv(t, env, "restic", args...)
	}
	rs("init")
	rs("backup", "--host", "h", src)
	os.WriteFile(filepath.Join(src, "big/multipart.bin"), randomBytes(9<<20), 0o644)
	os.WriteFile(filepath.Join(src, "later"), []byte("later"), 0o644)
	rs("backup", "--host", "h", src)
	rs("check", "--read-data")
	rs("forget", "--keep-last", "1", "--prune")
	rs("check", "--read-data")
	if out := rs("snapshots", "--json"); strings.Count(out, `"id"`) != 1 {
		t.Errorf("restic snapshots after forget --keep-last 1:\n%s", out)
	}
	rs("restore", "latest", "--target", restored)
	sameTree(t, src, filepath.Join(restored, src))
}

// s3cmdSession: s3cmd mb, put (a 12 MiB file goes in 5 MiB parts), get,
// ls, sync both ways, del, rb.
func s3cmdSession(t *testing.T, info devcluster.S3Info) {
	work := t.TempDir()
	host := strings.TrimPrefix(strings.TrimPrefix(info.Endpoint, "http://"), "https://")
	conf := filepath.Join(work, "s3cfg")
	cfg := fmt.Sprintf("[default]\naccess_key = %s\nsecret_key = %s\nhost_base = %s\nhost_bucket = %s\nuse_https = %v\n"+
		"signature_v2 = False\nmultipart_chunk_size_mb = 5\ncheck_ssl_certificate = True\n",
		info.AccessKey, info.SecretKey, host, host, strings.HasPrefix(info.Endpoint, "https"))
	if info.CAFile != "" {
		cfg += "ca_certs_file = " + info.CAFile + "\n"
	}
	os.WriteFile(conf, []byte(cfg), 0o600)
	src, back := filepath.Join(work, "src"), filepath.Join(work, "back")
	awkwardTree(t, src, 12<<20+5)
	env := os.Environ()
	sc := func(args ...string) string {
		t.Helper()
		return runEnv(t, env, "s3cmd", append([]string{"-c", conf, "--no-progress"}, args...)...)
	}
	b := "s3://" + bucketFor(info, "s3cmd")
	sc("mb", b)
	sc("put", filepath.Join(src, "big/multipart.bin"), b+"/one/big.bin")
	sc("put", filepath.Join(src, "a+b=c.txt"), b+"/one/a+b=c.txt")
	signurlGet(t, info, strings.TrimSpace(sc("signurl", b+"/one/a+b=c.txt", "+600")), readFile(t, filepath.Join(src, "a+b=c.txt")))
	got := filepath.Join(work, "got")
	sc("get", b+"/one/big.bin", got)
	if !bytes.Equal(readFile(t, got), readFile(t, filepath.Join(src, "big/multipart.bin"))) {
		t.Error("s3cmd get of the multipart object differs from what put sent")
	}
	if out := sc("ls", b+"/one/"); !strings.Contains(out, b+"/one/big.bin") || !strings.Contains(out, "a+b=c.txt") {
		t.Errorf("s3cmd ls:\n%s", out)
	}
	sc("sync", src+"/", b+"/tree/")
	sc("sync", b+"/tree/", back+"/")
	sameTree(t, src, back)
	// A second sync sends nothing: the listing's ETags and sizes match.
	if out := sc("sync", "--dry-run", src+"/", b+"/tree/"); strings.Contains(out, "upload:") {
		t.Errorf("a second s3cmd sync would upload again:\n%s", out)
	}
	sc("del", b+"/one/big.bin")
	if out := sc("ls", b+"/one/"); strings.Contains(out, "big.bin") {
		t.Errorf("s3cmd ls after del:\n%s", out)
	}
	sc("del", "--recursive", "--force", b+"/")
	sc("rb", b)
	if out := sc("ls"); strings.Contains(out, b) {
		t.Errorf("s3cmd ls after rb:\n%s", out)
	}
}

// signurlGet reads a SigV2 presigned URL (s3cmd signurl) with a plain
// HTTP client and checks it gives want; the same URL with its signature
// changed is refused.
func signurlGet(t *testing.T, info devcluster.S3Info, url string, want []byte) {
	t.Helper()
	c := &http.Client{Transport: caTransport(t, info.CAFile), Timeout: time.Minute}
	get := func(u string) (int, []byte) {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	if !strings.Contains(url, "Signature=") {
		t.Fatalf("s3cmd signurl printed %q, not a SigV2 presigned URL", url)
	}
	if strings.HasPrefix(info.Endpoint, "https://") {
		// s3cmd signurl always writes http://; the scheme is not signed.
		url = "https://" + strings.TrimPrefix(url, "http://")
	}
	if st, body := get(url); st != http.StatusOK || !bytes.Equal(body, want) {
		t.Errorf("GET of s3cmd's presigned URL: %d %q", st, body)
	}
	if st, body := get(strings.Replace(url, "Signature=", "Signature=A", 1)); st != http.StatusForbidden || !bytes.Contains(body, []byte("SignatureDoesNotMatch")) {
		t.Errorf("GET of a presigned URL with another signature: %d %q, want 403 SignatureDoesNotMatch", st, body)
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
