package conf

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestConnectErrorSaysWhatToDo(t *testing.T) {
	c := &Config{EtcdEndpoints: []string{"http://127.0.0.1:2999"}, Path: "/x/cairn.conf"}
	for _, tc := range []struct {
		name string
		err  error
		want []string
	}{
		{"deadline", fmt.Errorf("etcd http://127.0.0.1:2999: %w", context.DeadlineExceeded),
			[]string{"no mon answered at http://127.0.0.1:2999", "/x/cairn.conf", "may be down", "grep :2999"}},
		{"unavailable", status.Error(codes.Unavailable, "connection refused"),
			[]string{"no mon answered", "may be down"}},
		{"auth", fmt.Errorf("etcd x does not answer: %w", rpctypes.ErrAuthFailed),
			[]string{"/x/cairn.conf", "key does not match this cluster", "use the cairn.conf"}},
		{"no user", rpctypes.ErrUserEmpty, []string{"etcd_auth = false"}},
	} {
		got := c.ConnectError(tc.err)
		if !errors.Is(got, tc.err) {
			t.Errorf("%s: %v does not wrap %v", tc.name, got, tc.err)
		}
		for _, w := range tc.want {
			if !strings.Contains(got.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, got, w)
			}
		}
	}
	other := errors.New("etcd holds cluster a, but the config is for b")
	if got := c.ConnectError(other); got != other {
		t.Errorf("an unrelated error was changed: %v", got)
	}
	if c.ConnectError(nil) != nil {
		t.Error("nil became an error")
	}
}

func TestFirstPort(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:2379": "2379", "http://[::1]:12000/": "12000", "http://[::1]": "2379", "": "2379",
	} {
		if got := firstPort([]string{in}); got != want {
			t.Errorf("firstPort(%q) = %q, want %q", in, got, want)
		}
	}
}
