package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestS3Users: S3 users and access keys through the CLI of a real cluster:
// what each command prints (text and --json), the errors that say what to
// do, and that a secret is printed by key create and nowhere else: in no
// listing and no daemon's log (the secrets are in etcd's files, as they must
// be, and in nothing the mon or an OSD wrote).
func TestS3Users(t *testing.T) {
	t.Parallel()
	c := startCluster(t, clusterOpts{hosts: 1, perHost: 1})
	run := func(args ...string) []byte {
		t.Helper()
		out, err := c.cli(nil, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	runJSON := func(v any, args ...string) string {
		t.Helper()
		out := run(append(args, "--json")...)
		if err := json.Unmarshal(out, v); err != nil {
			t.Fatalf("cairn %s --json: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	fails := func(want string, args ...string) {
		t.Helper()
		out, err := c.cli(nil, args...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("cairn %s: want an error containing %q, got %v (output %q)", strings.Join(args, " "), want, err, out)
		}
	}
	type user struct {
		Name    string    `json:"name"`
		Created time.Time `json:"created"`
		Keys    int       `json:"keys"`
	}
	type newKey struct {
		AccessKey string    `json:"access_key"`
		SecretKey string    `json:"secret_key"`
		User      string    `json:"user"`
		Created   time.Time `json:"created"`
	}
	accessKeyRE := regexp.MustCompile(`^CK[A-Z0-9]{18}$`)
	secretRE := regexp.MustCompile(`^[A-Za-z0-9+/]{40}$`)

	var users []user
	if raw := runJSON(&users, "s3", "user", "ls"); strings.TrimSpace(raw) != "[]" {
		t.Fatalf("no users yet: %s", raw)
	}
	var u user
	runJSON(&u, "s3", "user", "create", "alice")
	if u.Name != "alice" || u.Keys != 0 || time.Since(u.Created) > time.Minute {
		t.Fatalf("user create --json: %+v", u)
	}
	if out := string(run("s3", "user", "create", "carol")); !strings.Contains(out, `s3 user "carol" created`) || !strings.Contains(out, "cairn s3 key create carol") {
		t.Fatalf("user create: %q", out)
	}
	fails(`s3 user "alice" exists already`, "s3", "user", "create", "alice")
	fails("invalid s3 user name", "s3", "user", "create", "bad/name")
	fails(`no s3 user "bob" (cairn s3 user create bob creates it`, "s3", "key", "create", "bob")
	fails(`no s3 user "bob"`, "s3", "key", "ls", "bob")
	fails(`no s3 user "bob"`, "s3", "user", "rm", "bob")

	// Two keys, one shown as JSON and one as text: each secret once.
	var k1 newKey
	raw1 := runJSON(&k1, "s3", "key", "create", "alice")
	if !accessKeyRE.MatchString(k1.AccessKey) || !secretRE.MatchString(k1.SecretKey) || k1.User != "alice" || k1.Created.IsZero() {
		t.Fatalf("key create --json: %s", raw1)
	}
	out := string(run("s3", "key", "create", "alice"))
	m := regexp.MustCompile(`(?m)^access_key: (\S+)\nsecret_key: (\S+)$`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "shown only this once") {
		t.Fatalf("key create: %q", out)
	}
	k2 := newKey{AccessKey: m[1], SecretKey: m[2]}
	if !accessKeyRE.MatchString(k2.AccessKey) || !secretRE.MatchString(k2.SecretKey) || k2.AccessKey == k1.AccessKey {
		t.Fatalf("key create: %q", out)
	}
	secrets := []string{k1.SecretKey, k2.SecretKey}
	noSecret := func(what, s string) {
		t.Helper()
		for _, sec := range secrets {
			if strings.Contains(s, sec) {
				t.Errorf("%s shows a secret:\n%s", what, s)
			}
		}
	}

	var keys []map[string]any
	raw := runJSON(&keys, "s3", "key", "ls", "alice")
	noSecret("key ls --json", raw)
	if len(keys) != 2 {
		t.Fatalf("key ls --json: %s", raw)
	}
	for _, k := range keys {
		if len(k) != 3 || k["user"] != "alice" || k["created"] == nil || (k["access_key"] != k1.AccessKey && k["access_key"] != k2.AccessKey) {
			t.Fatalf("key ls --json: an entry %v, want access_key, user and created", k)
		}
	}
	out = string(run("s3", "key", "ls", "alice"))
	noSecret("key ls", out)
	if !strings.HasPrefix(out, "ACCESS KEY") || !strings.Contains(out, k1.AccessKey) || !strings.Contains(out, k2.AccessKey) {
		t.Fatalf("key ls: %q", out)
	}
	raw = runJSON(&users, "s3", "user", "ls")
	noSecret("user ls --json", raw)
	if len(users) != 2 || users[0].Name != "alice" || users[0].Keys != 2 || users[1].Name != "carol" || users[1].Keys != 0 {
		t.Fatalf("user ls --json: %s", raw)
	}
	out = string(run("s3", "user", "ls"))
	if !regexp.MustCompile(`(?m)^NAME\s+KEYS\s+CREATED\nalice\s+2\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\ncarol\s+0\s`).MatchString(out) {
		t.Fatalf("user ls: %q", out)
	}

	// Removing keys: only an existing one, only as its own user's.
	fails(`s3 user "alice" has no access key CKAAAAAAAAAAAAAAAAAA`, "s3", "key", "rm", "alice", "CKAAAAAAAAAAAAAAAAAA")
	fails("is not an access key", "s3", "key", "rm", "alice", "nonsense")
	fails("cairn s3 key rm USER ACCESSKEY", "s3", "key", "rm", k1.AccessKey)
	fails(`access key `+k1.AccessKey+` belongs to s3 user "alice", not "carol"`, "s3", "key", "rm", "carol", k1.AccessKey)
	var rm map[string]string
	runJSON(&rm, "s3", "key", "rm", "alice", k1.AccessKey)
	if rm["removed"] != k1.AccessKey || rm["user"] != "alice" || len(rm) != 2 {
		t.Fatalf("key rm --json: %v", rm)
	}
	fails("has no access key "+k1.AccessKey, "s3", "key", "rm", "alice", k1.AccessKey)
	if out := string(run("s3", "key", "ls", "alice")); strings.Contains(out, k1.AccessKey) || !strings.Contains(out, k2.AccessKey) {
		t.Fatalf("key ls after rm: %q", out)
	}

	// Removing a user removes its keys.
	var urm struct {
		Removed     string   `json:"removed"`
		RemovedKeys []string `json:"removed_keys"`
	}
	runJSON(&urm, "s3", "user", "rm", "alice")
	if urm.Removed != "alice" || len(urm.RemovedKeys) != 1 || urm.RemovedKeys[0] != k2.AccessKey {
		t.Fatalf("user rm --json: %+v", urm)
	}
	fails(`no s3 user "alice"`, "s3", "key", "ls", "alice")
	if out := string(run("s3", "user", "rm", "carol")); out != "s3 user \"carol\" removed (it had no access keys)\n" {
		t.Fatalf("user rm: %q", out)
	}
	if raw := runJSON(&users, "s3", "user", "ls"); len(users) != 0 {
		t.Fatalf("user ls after rm: %s", raw)
	}

	// No daemon wrote a secret to its log.
	logs, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
	if len(logs) < 2 {
		t.Fatalf("want the logs of the mon and the OSD in %s, found %v", c.dir, logs)
	}
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		noSecret(f, string(b))
	}
}
