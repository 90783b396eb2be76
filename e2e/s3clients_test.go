package e2e

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
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

// TestS3Clients runs the clients nobody here wrote against one cluster's
// gateway: rclone, restic and s3cmd as processes, minio-go and the AWS SDK
// for Go (with its transfer manager) from this test.
func TestS3Clients(t *testing.T) {
	for _, tool := range []string{"rclone", "restic", "s3cmd"} {
		requireTool(t, tool, "apt-get install "+tool)
	}
	c := startCluster(t, clusterOpts{s3: true})
	info := c.s3Info()
	for _, tc := range []struct {
		name string
		run  func(*testing.T, devcluster.S3Info, string)
	}{
		{"rclone", rcloneSession},
		{"restic", resticSession},
		{"s3cmd", s3cmdSession},
		{"minio-go", minioSession},
		{"aws-sdk-go-v2", sdkSession},
	} {
		ok := t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			tc.run(t, info, "")
			t.Logf("%.1f s", time.Since(start).Seconds())
		})
		if !ok {
			t.Logf("cluster logs:\n%s", c.logs())
		}
	}
}

// rcloneSession: rclone sync to a bucket and back, check both ways, then
// a changed tree synced again (new, changed and deleted files). Parts of
// 5 MiB from 5 MiB on, so the 12 MiB file goes up in 3 parts.
func rcloneSession(t *testing.T, info devcluster.S3Info, caFile string) {
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
		if caFile != "" {
			args = append([]string{"--ca-cert", caFile}, args...)
		}
		return runEnv(t, env, "rclone", args...)
	}
	rc("mkdir", "cairn:rclone")
	rc("sync", src, "cairn:rclone/tree")
	rc("check", src, "cairn:rclone/tree")
	rc("sync", "cairn:rclone/tree", back)
	rc("check", "cairn:rclone/tree", back)
	sameTree(t, src, back)
	// Change the tree: a new file, a changed one, a removed one.
	os.WriteFile(filepath.Join(src, "dir/new file"), []byte("new"), 0o644)
	os.WriteFile(filepath.Join(src, "a+b=c.txt"), randomBytes(5000), 0o644)
	os.Remove(filepath.Join(src, "dir/semi;colon,comma"))
	rc("sync", src, "cairn:rclone/tree")
	rc("check", src, "cairn:rclone/tree")
	rc("sync", "cairn:rclone/tree", back)
	sameTree(t, src, back)
	if out := rc("lsf", "cairn:rclone/tree/dir/"); !strings.Contains(out, "with space/") || strings.Contains(out, "semi;colon") {
		t.Errorf("rclone lsf of a directory:\n%s", out)
	}
	// A server-side copy, a move, and the MD5 rclone keeps for an object
	// it uploaded in parts.
	rc("copyto", "cairn:rclone/tree/big/multipart.bin", "cairn:rclone/copy.bin")
	rc("moveto", "cairn:rclone/copy.bin", "cairn:rclone/moved.bin")
	rc("check", "--download", filepath.Join(src, "big"), "cairn:rclone/tree/big")
	sum := md5.Sum(readFile(t, filepath.Join(src, "big/multipart.bin")))
	if out := rc("md5sum", "cairn:rclone/moved.bin"); !strings.HasPrefix(out, hex.EncodeToString(sum[:])+" ") {
		t.Errorf("rclone md5sum of the moved copy: %q, want %x", out, sum)
	}
	if out := rc("lsf", "cairn:rclone/"); strings.Contains(out, "copy.bin") || !strings.Contains(out, "moved.bin") {
		t.Errorf("rclone lsf after moveto:\n%s", out)
	}
	rc("purge", "cairn:rclone")
}

// resticSession: restic init, backup, a second backup of a changed tree,
// check --read-data, forget --keep-last 1 and prune, restore, and the
// restored tree equal byte for byte to the source.
func resticSession(t *testing.T, info devcluster.S3Info, caFile string) {
	work := t.TempDir()
	src, restored := filepath.Join(work, "src"), filepath.Join(work, "restored")
	awkwardTree(t, src, 9<<20)
	env := append(s3Env(info), "RESTIC_REPOSITORY=s3:"+info.Endpoint+"/restic", "RESTIC_PASSWORD=correct horse",
		"RESTIC_CACHE_DIR="+filepath.Join(work, "cache"))
	if caFile != "" {
		env = append(env, "RESTIC_CACERT="+caFile)
	}
	rs := func(args ...string) string {
		t.Helper()
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
func s3cmdSession(t *testing.T, info devcluster.S3Info, caFile string) {
	work := t.TempDir()
	host := strings.TrimPrefix(strings.TrimPrefix(info.Endpoint, "http://"), "https://")
	conf := filepath.Join(work, "s3cfg")
	cfg := fmt.Sprintf("[default]\naccess_key = %s\nsecret_key = %s\nhost_base = %s\nhost_bucket = %s\nuse_https = %v\n"+
		"signature_v2 = False\nmultipart_chunk_size_mb = 5\ncheck_ssl_certificate = True\n",
		info.AccessKey, info.SecretKey, host, host, strings.HasPrefix(info.Endpoint, "https"))
	if caFile != "" {
		cfg += "ca_certs_file = " + caFile + "\n"
	}
	os.WriteFile(conf, []byte(cfg), 0o600)
	src, back := filepath.Join(work, "src"), filepath.Join(work, "back")
	awkwardTree(t, src, 12<<20+5)
	env := os.Environ()
	sc := func(args ...string) string {
		t.Helper()
		return runEnv(t, env, "s3cmd", append([]string{"-c", conf, "--no-progress"}, args...)...)
	}
	sc("mb", "s3://s3cmd")
	sc("put", filepath.Join(src, "big/multipart.bin"), "s3://s3cmd/one/big.bin")
	sc("put", filepath.Join(src, "a+b=c.txt"), "s3://s3cmd/one/a+b=c.txt")
	got := filepath.Join(work, "got")
	sc("get", "s3://s3cmd/one/big.bin", got)
	if !bytes.Equal(readFile(t, got), readFile(t, filepath.Join(src, "big/multipart.bin"))) {
		t.Error("s3cmd get of the multipart object differs from what put sent")
	}
	if out := sc("ls", "s3://s3cmd/one/"); !strings.Contains(out, "s3://s3cmd/one/big.bin") || !strings.Contains(out, "a+b=c.txt") {
		t.Errorf("s3cmd ls:\n%s", out)
	}
	sc("sync", src+"/", "s3://s3cmd/tree/")
	sc("sync", "s3://s3cmd/tree/", back+"/")
	sameTree(t, src, back)
	// A second sync sends nothing: the listing's ETags and sizes match.
	if out := sc("sync", "--dry-run", src+"/", "s3://s3cmd/tree/"); strings.Contains(out, "upload:") {
		t.Errorf("a second s3cmd sync would upload again:\n%s", out)
	}
	sc("del", "s3://s3cmd/one/big.bin")
	if out := sc("ls", "s3://s3cmd/one/"); strings.Contains(out, "big.bin") {
		t.Errorf("s3cmd ls after del:\n%s", out)
	}
	sc("del", "--recursive", "--force", "s3://s3cmd/")
	sc("rb", "s3://s3cmd")
	if out := sc("ls"); strings.Contains(out, "s3://s3cmd") {
		t.Errorf("s3cmd ls after rb:\n%s", out)
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
