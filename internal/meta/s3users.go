package meta

// S3 users and their access keys. etcd holds
//
//	/cairn/s3/users/<name>       → {"created", "keys": [access keys, sorted]}
//	/cairn/s3/keys/<access key>  → {"user", "secret", "created"}
//
// The user's record lists its keys, and every write that adds or removes a
// key rewrites the user's record in the same transaction, guarded by the
// record's revision. So the two never disagree: no key outlives its user,
// two concurrent creations cannot both take a user's last free key slot or
// both create one name, and a gateway finds a key's secret and user in one
// record (S3Credentials watches only the keys).

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

const (
	prefixS3Users = prefix + "s3/users/" // s3/users/<name> → s3UserRecord JSON
	prefixS3Keys  = prefix + "s3/keys/"  // s3/keys/<access key> → s3KeyRecord JSON
)

// MaxS3KeysPerUser bounds a user's access keys (AWS allows an IAM user
// two; a few more leave room to rotate keys of several applications).
const MaxS3KeysPerUser = 16

// maxS3Attempts bounds the retries of a transaction that lost a race.
const maxS3Attempts = 100

// Errors of S3 user and key operations; the errors returned wrap them and
// say what to do.
var (
	ErrS3UserExists  = errors.New("s3 user exists already")
	ErrS3NoSuchUser  = errors.New("no such s3 user")
	ErrS3NoSuchKey   = errors.New("no such s3 access key")
	ErrS3TooManyKeys = errors.New("s3 user has the most access keys allowed")
	ErrS3BadName     = errors.New("invalid s3 user name or access key")
)

// s3Error is an error of kind (one of the ErrS3… values) with a message
// written for the operator.
type s3Error struct {
	kind error
	msg  string
}

func (e *s3Error) Error() string { return e.msg }
func (e *s3Error) Unwrap() error { return e.kind }

func s3Errorf(kind error, format string, args ...any) error {
	return &s3Error{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// S3User is an S3 user as listed.
type S3User struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
	Keys    int       `json:"keys"` // how many access keys it has
}

// S3Key is an access key as listed: never its secret, which only
// CreateS3Key returns.
type S3Key struct {
	AccessKey string    `json:"access_key"`
	User      string    `json:"user"`
	Created   time.Time `json:"created"`
}

type s3UserRecord struct {
	Created time.Time `json:"created"`
	Keys    []string  `json:"keys"`
}

type s3KeyRecord struct {
	User    string    `json:"user"`
	Secret  string    `json:"secret"`
	Created time.Time `json:"created"`
}

// CheckS3UserName says whether name may name an S3 user: 1 to 64
// characters of letters, digits and _.@+=,- (IAM's rule), not starting
// with '-' (it would read as a flag).
func CheckS3UserName(name string) error {
	ok := len(name) >= 1 && len(name) <= 64 && name[0] != '-'
	for _, r := range name {
		ok = ok && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.@+=,-", r))
	}
	if !ok {
		return s3Errorf(ErrS3BadName, "invalid s3 user name %q: use 1 to 64 letters, digits and _.@+=,- characters, not starting with -", name)
	}
	return nil
}

// checkAccessKey says whether ak looks like an access key: 20 upper-case
// letters and digits.
func checkAccessKey(ak string) error {
	ok := len(ak) == 20
	for _, r := range ak {
		ok = ok && (r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}
	if !ok {
		return s3Errorf(ErrS3BadName, "%q is not an access key: one is 20 upper-case letters and digits, as cairn s3 key create prints it", ak)
	}
	return nil
}

// newAccessKey returns a fresh access key id: "CK" and 18 characters of
// base32 (A-Z, 2-7), 90 random bits, shaped like AWS's "AKIA…".
func newAccessKey() string { return "CK" + rand.Text()[:18] }

// newSecret returns a fresh secret: 240 random bits as 40 base64
// characters, the length of AWS's secrets.
func newSecret() string {
	b := make([]byte, 30)
	rand.Read(b) // never fails (crypto/rand crashes the program instead)
	return base64.StdEncoding.EncodeToString(b)
}

// s3User reads a user's record and its revision.
func (s *Store) s3User(ctx context.Context, name string) (s3UserRecord, int64, error) {
	var rec s3UserRecord
	resp, err := s.cli.Get(ctx, prefixS3Users+name)
	if err != nil {
		return rec, 0, fmt.Errorf("etcd: read s3 user %q: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return rec, 0, s3Errorf(ErrS3NoSuchUser, "no s3 user %q (cairn s3 user create %s creates it; cairn s3 user ls lists them)", name, name)
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		return rec, 0, fmt.Errorf("etcd: the record of s3 user %q is damaged: %v", name, err)
	}
	return rec, resp.Kvs[0].ModRevision, nil
}

// CreateS3User creates a user without keys; it fails with ErrS3UserExists
// if the name is taken, even by a concurrent creation.
func (s *Store) CreateS3User(ctx context.Context, name string) (S3User, error) {
	if err := CheckS3UserName(name); err != nil {
		return S3User{}, err
	}
	rec := s3UserRecord{Created: time.Now().UTC(), Keys: []string{}}
	b, _ := json.Marshal(rec)
	key := prefixS3Users + name
	tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return S3User{}, fmt.Errorf("etcd: create s3 user %q: %w", name, err)
	}
	if !tr.Succeeded {
		return S3User{}, s3Errorf(ErrS3UserExists, "s3 user %q exists already (cairn s3 user ls lists the users)", name)
	}
	return S3User{Name: name, Created: rec.Created}, nil
}

// S3Users lists the users, by name.
func (s *Store) S3Users(ctx context.Context) ([]S3User, error) {
	resp, err := s.cli.Get(ctx, prefixS3Users, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcd: list s3 users: %w", err)
	}
	out := []S3User{}
	for _, kv := range resp.Kvs {
		name := strings.TrimPrefix(string(kv.Key), prefixS3Users)
		var rec s3UserRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return nil, fmt.Errorf("etcd: the record of s3 user %q is damaged: %v", name, err)
		}
		out = append(out, S3User{Name: name, Created: rec.Created, Keys: len(rec.Keys)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// RemoveS3User removes a user and, in the same transaction, every access
// key it has; it returns those keys. Gateways refuse them within a second
// (S3Credentials). Users own no buckets yet; once they do, removing a user
// that owns one will be refused.
func (s *Store) RemoveS3User(ctx context.Context, name string) ([]string, error) {
	if err := CheckS3UserName(name); err != nil {
		return nil, err
	}
	for range maxS3Attempts {
		rec, rev, err := s.s3User(ctx, name)
		if err != nil {
			return nil, err
		}
		ops := []clientv3.Op{clientv3.OpDelete(prefixS3Users + name)}
		for _, ak := range rec.Keys {
			ops = append(ops, clientv3.OpDelete(prefixS3Keys+ak))
		}
		tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(prefixS3Users+name), "=", rev)).
			Then(ops...).Commit()
		if err != nil {
			return nil, fmt.Errorf("etcd: remove s3 user %q: %w", name, err)
		}
		if tr.Succeeded {
			return rec.Keys, nil
		}
	}
	return nil, fmt.Errorf("etcd: removing s3 user %q lost the race %d times in a row", name, maxS3Attempts)
}

// CreateS3Key gives user a new access key and returns it with its secret,
// which nothing returns again. A user has at most MaxS3KeysPerUser keys.
func (s *Store) CreateS3Key(ctx context.Context, user string) (key S3Key, secret string, err error) {
	if err := CheckS3UserName(user); err != nil {
		return S3Key{}, "", err
	}
	for range maxS3Attempts {
		rec, rev, err := s.s3User(ctx, user)
		if err != nil {
			return S3Key{}, "", err
		}
		if len(rec.Keys) >= MaxS3KeysPerUser {
			return S3Key{}, "", s3Errorf(ErrS3TooManyKeys, "s3 user %q has %d access keys, the most a user may have: remove one first (cairn s3 key ls %s, cairn s3 key rm %s ACCESSKEY)",
				user, len(rec.Keys), user, user)
		}
		key = S3Key{AccessKey: newAccessKey(), User: user, Created: time.Now().UTC()}
		secret = newSecret()
		kb, _ := json.Marshal(s3KeyRecord{User: user, Secret: secret, Created: key.Created})
		rec.Keys = append(rec.Keys, key.AccessKey)
		slices.Sort(rec.Keys)
		ub, _ := json.Marshal(rec)
		// The access key is new unless 90 random bits repeat: then the
		// transaction fails and the next attempt draws another.
		tr, err := s.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(prefixS3Users+user), "=", rev),
			clientv3.Compare(clientv3.CreateRevision(prefixS3Keys+key.AccessKey), "=", 0),
		).Then(
			clientv3.OpPut(prefixS3Users+user, string(ub)),
			clientv3.OpPut(prefixS3Keys+key.AccessKey, string(kb)),
		).Commit()
		if err != nil {
			return S3Key{}, "", fmt.Errorf("etcd: create an access key for s3 user %q: %w", user, err)
		}
		if tr.Succeeded {
			return key, secret, nil
		}
	}
	return S3Key{}, "", fmt.Errorf("etcd: creating an access key for s3 user %q lost the race %d times in a row", user, maxS3Attempts)
}

// S3Keys lists a user's access keys (never their secrets), by access key.
func (s *Store) S3Keys(ctx context.Context, user string) ([]S3Key, error) {
	if err := CheckS3UserName(user); err != nil {
		return nil, err
	}
	for range maxS3Attempts {
		rec, rev, err := s.s3User(ctx, user)
		if err != nil {
			return nil, err
		}
		ops := make([]clientv3.Op, len(rec.Keys))
		for i, ak := range rec.Keys {
			ops[i] = clientv3.OpGet(prefixS3Keys + ak)
		}
		// The keys as of the user's record: the transaction reads them
		// only if the record did not change since.
		tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(prefixS3Users+user), "=", rev)).
			Then(ops...).Commit()
		if err != nil {
			return nil, fmt.Errorf("etcd: list the access keys of s3 user %q: %w", user, err)
		}
		if !tr.Succeeded {
			continue
		}
		out := []S3Key{}
		for i, r := range tr.Responses {
			kvs := r.GetResponseRange().GetKvs()
			if len(kvs) == 0 {
				return nil, fmt.Errorf("etcd: s3 user %q lists access key %s, which has no record", user, rec.Keys[i])
			}
			var kr s3KeyRecord
			if err := json.Unmarshal(kvs[0].Value, &kr); err != nil {
				return nil, fmt.Errorf("etcd: the record of access key %s is damaged: %v", rec.Keys[i], err)
			}
			out = append(out, S3Key{AccessKey: rec.Keys[i], User: kr.User, Created: kr.Created})
		}
		return out, nil
	}
	return nil, fmt.Errorf("etcd: listing the access keys of s3 user %q lost the race %d times in a row", user, maxS3Attempts)
}

// RemoveS3Key removes user's access key accessKey; it refuses a key of
// another user, so a mistyped user name removes nothing.
func (s *Store) RemoveS3Key(ctx context.Context, user, accessKey string) error {
	if err := CheckS3UserName(user); err != nil {
		return err
	}
	if err := checkAccessKey(accessKey); err != nil {
		return err
	}
	for range maxS3Attempts {
		rec, rev, err := s.s3User(ctx, user)
		if err != nil {
			return err
		}
		i := slices.Index(rec.Keys, accessKey)
		if i < 0 {
			return s.noSuchS3Key(ctx, user, accessKey)
		}
		rec.Keys = slices.Delete(rec.Keys, i, i+1)
		ub, _ := json.Marshal(rec)
		tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(prefixS3Users+user), "=", rev)).
			Then(clientv3.OpPut(prefixS3Users+user, string(ub)), clientv3.OpDelete(prefixS3Keys+accessKey)).Commit()
		if err != nil {
			return fmt.Errorf("etcd: remove access key %s of s3 user %q: %w", accessKey, user, err)
		}
		if tr.Succeeded {
			return nil
		}
	}
	return fmt.Errorf("etcd: removing access key %s of s3 user %q lost the race %d times in a row", accessKey, user, maxS3Attempts)
}

// noSuchS3Key explains why user has no key accessKey: another user has it,
// or nobody does.
func (s *Store) noSuchS3Key(ctx context.Context, user, accessKey string) error {
	resp, err := s.cli.Get(ctx, prefixS3Keys+accessKey)
	if err == nil && len(resp.Kvs) == 1 {
		var kr s3KeyRecord
		if json.Unmarshal(resp.Kvs[0].Value, &kr) == nil {
			return s3Errorf(ErrS3NoSuchKey, "access key %s belongs to s3 user %q, not %q: nothing removed", accessKey, kr.User, user)
		}
	}
	return s3Errorf(ErrS3NoSuchKey, "s3 user %q has no access key %s (cairn s3 key ls %s lists its keys)", user, accessKey, user)
}
