package meta

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

var (
	accessKeyRE = regexp.MustCompile(`^CK[A-Z2-7]{18}$`)
	secretRE    = regexp.MustCompile(`^[A-Za-z0-9+/]{40}$`)
)

// TestS3UsersAndKeys: the operations and their errors, one at a time.
func TestS3UsersAndKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	s := connect(t, startEtcd(t))
	ctx := context.Background()

	if users, err := s.S3Users(ctx); err != nil || len(users) != 0 {
		t.Fatalf("no users yet: %v, %v", users, err)
	}
	u, err := s.CreateS3User(ctx, "alice")
	if err != nil || u.Name != "alice" || time.Since(u.Created) > time.Minute {
		t.Fatalf("create alice: %+v, %v", u, err)
	}
	if _, err := s.CreateS3User(ctx, "alice"); !errors.Is(err, ErrS3UserExists) || !strings.Contains(err.Error(), `"alice" exists already`) {
		t.Fatalf("a second alice: %v", err)
	}
	for _, bad := range []string{"", "a/b", "-x", "a b", strings.Repeat("x", 65), "ü"} {
		if _, err := s.CreateS3User(ctx, bad); !errors.Is(err, ErrS3BadName) {
			t.Errorf("user name %q: want ErrS3BadName, got %v", bad, err)
		}
	}
	if _, _, err := s.CreateS3Key(ctx, "bob"); !errors.Is(err, ErrS3NoSuchUser) || !strings.Contains(err.Error(), "cairn s3 user create bob") {
		t.Fatalf("a key for a missing user: %v", err)
	}

	k1, sec1, err := s.CreateS3Key(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !accessKeyRE.MatchString(k1.AccessKey) || !secretRE.MatchString(sec1) || k1.User != "alice" {
		t.Fatalf("new key: %+v, secret of %d chars", k1, len(sec1))
	}
	k2, sec2, err := s.CreateS3Key(ctx, "alice")
	if err != nil || k2.AccessKey == k1.AccessKey || sec2 == sec1 {
		t.Fatalf("second key: %+v, %v", k2, err)
	}
	keys, err := s.S3Keys(ctx, "alice")
	if err != nil || len(keys) != 2 {
		t.Fatalf("alice's keys: %+v, %v", keys, err)
	}
	want := []string{k1.AccessKey, k2.AccessKey}
	slices.Sort(want)
	if keys[0].AccessKey != want[0] || keys[1].AccessKey != want[1] || keys[0].User != "alice" || keys[0].Created.IsZero() {
		t.Fatalf("alice's keys: %+v, want %v", keys, want)
	}
	if b, _ := json.Marshal(keys); strings.Contains(string(b), sec1) || strings.Contains(string(b), sec2) {
		t.Fatalf("a listing holds a secret: %s", b)
	}
	if _, err := s.S3Keys(ctx, "bob"); !errors.Is(err, ErrS3NoSuchUser) {
		t.Fatalf("keys of a missing user: %v", err)
	}

	if _, err := s.CreateS3User(ctx, "carol"); err != nil {
		t.Fatal(err)
	}
	users, err := s.S3Users(ctx)
	if err != nil || len(users) != 2 || users[0].Name != "alice" || users[0].Keys != 2 || users[1].Name != "carol" || users[1].Keys != 0 {
		t.Fatalf("users: %+v, %v", users, err)
	}

	// Removing a key: only its owner's, only one that exists.
	if err := s.RemoveS3Key(ctx, "carol", k1.AccessKey); !errors.Is(err, ErrS3NoSuchKey) || !strings.Contains(err.Error(), `belongs to s3 user "alice"`) {
		t.Fatalf("removing alice's key as carol's: %v", err)
	}
	if err := s.RemoveS3Key(ctx, "alice", "CKAAAAAAAAAAAAAAAAAA"); !errors.Is(err, ErrS3NoSuchKey) {
		t.Fatalf("removing a missing key: %v", err)
	}
	if err := s.RemoveS3Key(ctx, "alice", "nonsense"); !errors.Is(err, ErrS3BadName) {
		t.Fatalf("removing a malformed key: %v", err)
	}
	if err := s.RemoveS3Key(ctx, "alice", k1.AccessKey); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveS3Key(ctx, "alice", k1.AccessKey); !errors.Is(err, ErrS3NoSuchKey) {
		t.Fatalf("removing a key twice: %v", err)
	}
	if keys, _ := s.S3Keys(ctx, "alice"); len(keys) != 1 || keys[0].AccessKey != k2.AccessKey {
		t.Fatalf("after rm: %+v", keys)
	}

	// At most MaxS3KeysPerUser keys.
	for range MaxS3KeysPerUser - 1 {
		if _, _, err := s.CreateS3Key(ctx, "alice"); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.CreateS3Key(ctx, "alice"); !errors.Is(err, ErrS3TooManyKeys) {
		t.Fatalf("key %d: %v", MaxS3KeysPerUser+1, err)
	}

	// Removing a user removes its keys.
	removed, err := s.RemoveS3User(ctx, "alice")
	if err != nil || len(removed) != MaxS3KeysPerUser || !slices.Contains(removed, k2.AccessKey) {
		t.Fatalf("rm alice: %v, %v", removed, err)
	}
	if resp, _ := s.cli.Get(ctx, prefixS3Keys, clientv3.WithPrefix(), clientv3.WithCountOnly()); resp.Count != 0 {
		t.Fatalf("%d key records outlived their user", resp.Count)
	}
	if _, err := s.RemoveS3User(ctx, "alice"); !errors.Is(err, ErrS3NoSuchUser) {
		t.Fatalf("rm alice twice: %v", err)
	}
	if users, _ := s.S3Users(ctx); len(users) != 1 || users[0].Name != "carol" {
		t.Fatalf("users after rm: %+v", users)
	}
}

// TestS3ConcurrentWrites: of racing creations of one name exactly one
// wins; racing key creations never pass the limit; a user removed while
// keys are being created for it leaves no key behind.
func TestS3ConcurrentWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	ep := startEtcd(t)
	s := connect(t, ep)
	ctx := context.Background()
	stores := []*Store{s, connect(t, ep), connect(t, ep), connect(t, ep)}

	race := func(n int, fn func(i int) error) (won int, errs []error) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				err := fn(i)
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					won++
				} else {
					errs = append(errs, err)
				}
			})
		}
		wg.Wait()
		return won, errs
	}

	won, errs := race(8, func(i int) error {
		_, err := stores[i%len(stores)].CreateS3User(ctx, "same")
		return err
	})
	if won != 1 {
		t.Fatalf("8 racing creations of one user: %d won", won)
	}
	for _, err := range errs {
		if !errors.Is(err, ErrS3UserExists) {
			t.Fatalf("a losing creation: %v", err)
		}
	}

	won, errs = race(MaxS3KeysPerUser+4, func(i int) error {
		_, _, err := stores[i%len(stores)].CreateS3Key(ctx, "same")
		return err
	})
	if won != MaxS3KeysPerUser || len(errs) != 4 {
		t.Fatalf("%d racing key creations: %d won, errors %v", MaxS3KeysPerUser+4, won, errs)
	}
	for _, err := range errs {
		if !errors.Is(err, ErrS3TooManyKeys) {
			t.Fatalf("a losing key creation: %v", err)
		}
	}
	checkS3Consistent(t, s)

	// Creations and removals of keys racing the removal of their user.
	for round := range 5 {
		name := fmt.Sprintf("u%d", round)
		if _, err := s.CreateS3User(ctx, name); err != nil {
			t.Fatal(err)
		}
		race(6, func(i int) error {
			st := stores[i%len(stores)]
			if i == 3 {
				_, err := st.RemoveS3User(ctx, name)
				return err
			}
			k, _, err := st.CreateS3Key(ctx, name)
			if err == nil && i%2 == 0 {
				err = st.RemoveS3Key(ctx, name, k.AccessKey)
			}
			if err != nil && !errors.Is(err, ErrS3NoSuchUser) {
				t.Errorf("round %d: %v", round, err)
			}
			return err
		})
		checkS3Consistent(t, s)
	}
}

// checkS3Consistent checks that users and keys agree: every key record
// belongs to a user that lists it, and every listed key has a record.
func checkS3Consistent(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	resp, err := s.cli.Get(ctx, prefix+"s3/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]s3UserRecord{}
	keys := map[string]s3KeyRecord{}
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		switch {
		case strings.HasPrefix(k, prefixS3Users):
			var r s3UserRecord
			json.Unmarshal(kv.Value, &r)
			users[strings.TrimPrefix(k, prefixS3Users)] = r
		case strings.HasPrefix(k, prefixS3Keys):
			var r s3KeyRecord
			json.Unmarshal(kv.Value, &r)
			keys[strings.TrimPrefix(k, prefixS3Keys)] = r
		}
	}
	for ak, r := range keys {
		if !slices.Contains(users[r.User].Keys, ak) {
			t.Fatalf("key %s of %q: the user does not list it (users %+v)", ak, r.User, users)
		}
	}
	for name, r := range users {
		if len(r.Keys) > MaxS3KeysPerUser {
			t.Fatalf("user %q has %d keys", name, len(r.Keys))
		}
		for _, ak := range r.Keys {
			if keys[ak].User != name {
				t.Fatalf("user %q lists key %s, whose record says %+v", name, ak, keys[ak])
			}
		}
	}
}

// TestS3CredentialsFollowEtcd: a gateway's copy of the keys sees keys
// created and removed (a removal within a second), keys of a removed user
// vanish, concurrent Lookups are safe, and a copy whose watch starts at a
// revision etcd compacted since reads everything again.
func TestS3CredentialsFollowEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	ep := startEtcd(t)
	s := connect(t, ep)
	ctx := context.Background()
	if _, err := s.CreateS3User(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	k0, sec0, err := s.CreateS3Key(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	creds, err := connect(t, ep).WatchS3Credentials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer creds.Close()
	if sec, user, ok := creds.Lookup(k0.AccessKey); !ok || sec != sec0 || user != "alice" {
		t.Fatalf("a key that existed before the watch: %q %q %v", sec, user, ok)
	}
	if _, _, ok := creds.Lookup("CKAAAAAAAAAAAAAAAAAA"); ok {
		t.Fatal("a key that never existed was found")
	}

	// Readers hammer Lookup while keys come and go (-race checks them).
	stop := make(chan struct{})
	var lookups atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if sec, user, ok := creds.Lookup(k0.AccessKey); ok && (sec != sec0 || user != "alice") {
					t.Errorf("Lookup returned %q %q", sec, user)
				}
				lookups.Add(1)
				if i%64 == 0 {
					time.Sleep(100 * time.Microsecond) // leave the 2 CPUs to etcd too
				}
			}
		})
	}

	waitFor := func(what string, within time.Duration, cond func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > within {
				t.Fatalf("%s: not within %v", what, within)
			}
			time.Sleep(time.Millisecond)
		}
		return time.Since(start)
	}
	for i := range 5 {
		k, sec, err := s.CreateS3Key(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		waitFor("a new key is found", time.Second, func() bool {
			got, user, ok := creds.Lookup(k.AccessKey)
			return ok && got == sec && user == "alice"
		})
		if err := s.RemoveS3Key(ctx, "alice", k.AccessKey); err != nil {
			t.Fatal(err)
		}
		d := waitFor("a removed key is refused", time.Second, func() bool {
			_, _, ok := creds.Lookup(k.AccessKey)
			return !ok
		})
		t.Logf("round %d: key refused %v after its removal returned", i, d)
	}

	if _, err := s.RemoveS3User(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	waitFor("the keys of a removed user are refused", time.Second, func() bool {
		_, _, ok := creds.Lookup(k0.AccessKey)
		return !ok && creds.Len() == 0
	})
	close(stop)
	wg.Wait()
	t.Logf("%d concurrent lookups", lookups.Load())
	if n := creds.reloads.Load(); n != 0 {
		t.Fatalf("the watch broke and the copy read every key again %d times", n)
	}

	// A copy as read before changes, whose watch starts only after them:
	// the watch starts at the revision after the read, so it delivers them.
	before, rev, err := s.loadS3Credentials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateS3User(ctx, "dave"); err != nil {
		t.Fatal(err)
	}
	kd, secd, err := s.CreateS3Key(ctx, "dave")
	if err != nil {
		t.Fatal(err)
	}
	gap := s.followS3Credentials(ctx, before, rev)
	waitFor("a key created between the read and the watch is found", time.Second, func() bool {
		got, user, ok := gap.Lookup(kd.AccessKey)
		return ok && got == secd && user == "dave"
	})
	gap.Close()
	if n := gap.reloads.Load(); n != 0 {
		t.Fatalf("the copy found the key only by reading every key again (%d times)", n)
	}

	// A copy as read before changes that etcd then compacted away: its
	// watch from there fails, and it must read the keys again.
	stale, rev, err := s.loadS3Credentials(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateS3User(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	kb, secb, err := s.CreateS3Key(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.cli.Put(ctx, prefix+"unrelated", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	late := s.followS3Credentials(wctx, stale, rev)
	waitFor("a copy whose revisions were compacted reads the keys again", 5*time.Second, func() bool {
		got, user, ok := late.Lookup(kb.AccessKey)
		return ok && got == secb && user == "bob"
	})
	if n := late.reloads.Load(); n != 1 {
		t.Fatalf("a copy whose revisions were compacted read every key %d times, want once", n)
	}
	// And it follows changes from there.
	if err := s.RemoveS3Key(ctx, "bob", kb.AccessKey); err != nil {
		t.Fatal(err)
	}
	waitFor("after the reload, a removal is seen", time.Second, func() bool {
		_, _, ok := late.Lookup(kb.AccessKey)
		return !ok
	})
	cancel() // ending ctx stops it as Close does
	select {
	case <-late.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the copy's watch did not stop when its context ended")
	}
}
