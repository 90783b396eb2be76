// Package conf reads and writes cairn.conf, the small file that tells every
// command and daemon where the cluster's etcd is and holds the cluster key.
//
// Format: one "key = value" per line, '#' starts a comment. The file holds a
// secret (the cluster key), so it is written with mode 0600 and a file that
// others can read is refused.
package conf

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// EnvVar names the environment variable that points at cairn.conf.
const EnvVar = "CAIRN_CONF"

// Config is the content of cairn.conf.
type Config struct {
	FSID          string   // cluster id
	EtcdEndpoints []string // http://host:port of etcd members
	ClusterKey    []byte   // shared secret every connection proves it holds
	// EtcdAuth: etcd requires the user "root" with EtcdPassword. True for
	// clusters whose etcd is cairn's own mon (which turns auth on); an
	// external etcd keeps whatever access control its operator set up.
	EtcdAuth bool
	// Encrypt: client↔OSD and OSD↔OSD connections are TLS, the cluster
	// key's handshake bound to each session (package rpc). Every daemon
	// and client of the cluster must agree.
	Encrypt bool
	// NoLocalSockets: daemons and clients on one host talk over TCP too,
	// not over the daemons' local sockets (package rpc, local.go); for
	// measuring the network path on one machine.
	NoLocalSockets bool
	Path           string // where it was loaded from (not stored)
}

// KeyLen is the length of a generated cluster key.
const KeyLen = 32

// New returns a config for a new cluster with a random fsid and key.
func New(endpoints []string) *Config {
	key := make([]byte, KeyLen)
	if _, err := rand.Read(key); err != nil {
		panic(fmt.Sprintf("conf: no randomness: %v", err))
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		panic(fmt.Sprintf("conf: no randomness: %v", err))
	}
	h := hex.EncodeToString(id)
	return &Config{
		FSID:          h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:],
		EtcdEndpoints: endpoints,
		ClusterKey:    key,
	}
}

// EtcdUser is the etcd user cairn authenticates as.
const EtcdUser = "root"

// EtcdPassword derives the etcd password from the cluster key, so holding
// cairn.conf is what grants access to etcd too.
func (c *Config) EtcdPassword() string {
	m := hmac.New(sha256.New, c.ClusterKey)
	m.Write([]byte("cairn etcd password"))
	return hex.EncodeToString(m.Sum(nil))
}

// DashboardPassword derives the web dashboard's password (user
// DashboardUser) from the cluster key: whoever holds cairn.conf can look.
func (c *Config) DashboardPassword() string {
	m := hmac.New(sha256.New, c.ClusterKey)
	m.Write([]byte("cairn dashboard password"))
	return hex.EncodeToString(m.Sum(nil))[:32]
}

// DashboardUser is the user name the dashboard asks for.
const DashboardUser = "admin"

// Find returns the path of cairn.conf: the flag value if set, else $CAIRN_CONF,
// else ./cairn.conf, else ./cairn-dev/cairn.conf (what `cairn dev` writes).
func Find(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if p := os.Getenv(EnvVar); p != "" {
		return p, nil
	}
	for _, p := range []string{"cairn.conf", filepath.Join("cairn-dev", "cairn.conf")} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no cairn.conf found: pass --conf FILE or set CAIRN_CONF (cairn dev writes DIR/cairn.conf)")
}

// Load reads and checks a cairn.conf.
func Load(path string) (*Config, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cairn.conf: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s: mode %o lets other users read the cluster key; run chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cairn.conf: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.Path = path
	return c, nil
}

// Parse decodes the text of a cairn.conf.
func Parse(b []byte) (*Config, error) {
	c := &Config{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("line %d: want key = value, got %q", n, line)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "fsid":
			c.FSID = v
		case "etcd_endpoints":
			c.EtcdEndpoints = nil
			for _, e := range strings.Split(v, ",") {
				if e = strings.TrimSpace(e); e != "" {
					c.EtcdEndpoints = append(c.EtcdEndpoints, e)
				}
			}
		case "etcd_auth", "encrypt", "local_sockets":
			b, err := strconv.ParseBool(v)
			if err != nil || v != "true" && v != "false" {
				return nil, fmt.Errorf("line %d: %s must be true or false, not %q", n, k, v)
			}
			switch k {
			case "encrypt":
				c.Encrypt = b
			case "local_sockets":
				c.NoLocalSockets = !b
			default:
				c.EtcdAuth = b
			}
		case "cluster_key":
			key, err := hex.DecodeString(v)
			if err != nil {
				return nil, fmt.Errorf("line %d: cluster_key is not hex: %v", n, err)
			}
			c.ClusterKey = key
		default:
			return nil, fmt.Errorf("line %d: unknown key %q", n, k)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	switch {
	case c.FSID == "":
		return nil, errors.New("fsid is missing")
	case len(c.EtcdEndpoints) == 0:
		return nil, errors.New("etcd_endpoints is missing")
	case len(c.ClusterKey) < 16:
		return nil, fmt.Errorf("cluster_key is %d bytes; at least 16 are required", len(c.ClusterKey))
	}
	return c, nil
}

// Save writes the config with mode 0600, atomically (temp file + rename).
func (c *Config) Save(path string) error {
	var b strings.Builder
	b.WriteString("# cairn cluster configuration. Holds the cluster key: keep it mode 0600.\n")
	fmt.Fprintf(&b, "fsid = %s\n", c.FSID)
	fmt.Fprintf(&b, "etcd_endpoints = %s\n", strings.Join(c.EtcdEndpoints, ","))
	fmt.Fprintf(&b, "etcd_auth = %t\n", c.EtcdAuth)
	fmt.Fprintf(&b, "cluster_key = %s\n", hex.EncodeToString(c.ClusterKey))
	if c.Encrypt {
		b.WriteString("encrypt = true\n")
	}
	if c.NoLocalSockets {
		b.WriteString("local_sockets = false\n")
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
