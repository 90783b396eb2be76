package nbdgw

import (
	"path/filepath"
	"strings"
	"testing"
)

// No TLS flags: no TLS; incomplete ones say which flag is missing, and a
// certificate that cannot be loaded is named.
func TestTLSConfigFlags(t *testing.T) {
	if cfg, err := TLSConfig("", "", ""); cfg != nil || err != nil {
		t.Fatalf("no flags: %v, %v; want no TLS", cfg, err)
	}
	dir := t.TempDir()
	for _, c := range []struct{ cert, key, ca, want string }{
		{"", "", "ca.pem", "--tls-client-ca needs --tls-cert and --tls-key"},
		{"cert.pem", "", "", "TLS needs both --tls-cert and --tls-key"},
		{"", "key.pem", "", "TLS needs both --tls-cert and --tls-key"},
		{filepath.Join(dir, "missing.pem"), filepath.Join(dir, "missing.key"), "", "loading the TLS certificate"},
	} {
		if _, err := TLSConfig(c.cert, c.key, c.ca); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("TLSConfig(%q, %q, %q): %v, want %q", c.cert, c.key, c.ca, err, c.want)
		}
	}
}
