package conf

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ConnectError turns err, from connecting to the etcd this config names,
// into an error that says what went wrong in the user's terms and what to
// check. etcd's own words ("context deadline exceeded", "authentication
// failed") name neither the mon nor the conf file, so a user cannot tell a
// stopped mon from a wrong endpoint or another cluster's cairn.conf.
// Errors of any other kind are returned unchanged.
func (c *Config) ConnectError(err error) error {
	if err == nil {
		return nil
	}
	eps := strings.Join(c.EtcdEndpoints, ", ")
	from := c.source()
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed):
		return fmt.Errorf("the mon at %s refused the cluster key in %s: that file's key does not match this cluster's "+
			"(a cairn.conf from another cluster, or from an earlier cluster on the same ports?); "+
			"use the cairn.conf this cluster's mon (or cairn dev) wrote: %w", eps, from, err)
	case errors.Is(err, rpctypes.ErrUserEmpty):
		return fmt.Errorf("the mon at %s requires etcd authentication, but %s says etcd_auth = false: "+
			"use the cairn.conf this cluster's mon (or cairn dev) wrote: %w", eps, from, err)
	case noAnswer(err):
		return fmt.Errorf("no mon answered at %s (etcd_endpoints in %s): the mon may be down or the endpoints wrong; "+
			"check that its cairn mon (or cairn dev) process is running and listening there, "+
			"e.g. with `ss -ltn | grep :%s`: %w", eps, from, firstPort(c.EtcdEndpoints), err)
	}
	return err
}

// source names where the config came from, for messages.
func (c *Config) source() string {
	if c.Path == "" {
		return "the cluster config"
	}
	return c.Path
}

// noAnswer reports whether err means that no etcd endpoint answered in time.
func noAnswer(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		code := se.GRPCStatus().Code()
		return code == codes.Unavailable || code == codes.DeadlineExceeded
	}
	return false
}

// firstPort returns the port of the first endpoint ("2379" of
// "http://127.0.0.1:2379"), for a command that looks for its listener.
func firstPort(endpoints []string) string {
	if len(endpoints) == 0 {
		return "2379"
	}
	e := endpoints[0]
	if i := strings.LastIndexByte(e, ':'); i >= 0 && !strings.HasSuffix(e[i:], "]") {
		return strings.TrimSuffix(e[i+1:], "/")
	}
	return "2379"
}
