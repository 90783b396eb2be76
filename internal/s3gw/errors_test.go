package s3gw

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// A write the cluster refuses for want of space answers 507
// InsufficientCapacity with the OSD's reason and not the cluster object's
// name; one it cannot serve now answers 503 ServiceUnavailable. Deletes go
// on while the data stripes cannot be written.
func TestClusterErrorsAnswered(t *testing.T) {
	env := newEnv(t)
	env.mkBucket(env.alice, "cap")
	env.put("cap", "old", []byte("kept"))
	const reason = "osd.0 is full (over 95% of its disk used): delete data or add OSDs"
	for _, c := range []struct {
		err          error
		code, prefix string
		status       int
	}{
		{ErrNoSpace, "InsufficientCapacity", "The cluster has no space for this write: ", 507},
		{ErrUnavailable, "ServiceUnavailable", "The cluster cannot serve this request now: ", 503},
	} {
		env.store.Fail = func(op, name string) error {
			if op == "put" && strings.HasPrefix(name, "s3d.") {
				return fmt.Errorf("stripe %s: %w: %s", name, c.err, reason)
			}
			return nil
		}
		resp, body := env.raw(http.MethodPut, "/cap/big", nil, make([]byte, inlineMax+1))
		want := "<Code>" + c.code + "</Code><Message>" + c.prefix + reason + "</Message>"
		if resp.StatusCode != c.status || !strings.Contains(string(body), want) {
			t.Fatalf("PUT refused with %v: %d %s; want %d and %s", c.err, resp.StatusCode, body, c.status, want)
		}
		if strings.Contains(string(body), "s3d.") {
			t.Fatalf("the answer names a cluster object: %s", body)
		}
	}
	if _, err := env.alice.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String("cap"), Key: aws.String("old")}); err != nil {
		t.Fatalf("DELETE while stripes cannot be written: %v", err)
	}
}

// A PUT refused at its first step (its intent, in a full index shard),
// before the gateway reads its body, still gets its answer: the gateway
// reads the rest of the body first. Otherwise a client that writes its whole
// body before it reads (no Expect: 100-continue, as SDKs send none under
// 2 MB) is cut off writing it, a broken pipe it retries for nothing.
func TestRefusedPUTAnsweredBeforeBody(t *testing.T) {
	env := newEnv(t)
	env.mkBucket(env.alice, "cap")
	env.store.Fail = func(op, name string) error {
		if op == "omapapply" && strings.HasPrefix(name, "s3i.") {
			return fmt.Errorf("%w: osd.0 is full", ErrNoSpace)
		}
		return nil
	}
	body := make([]byte, drainMax-1<<20) // more than the sockets buffer
	req, err := http.NewRequest(http.MethodPut, env.srv.URL+"/cap/big", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	req.Header.Set("x-amz-content-sha256", "UNSIGNED-PAYLOAD")
	err = v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: "AKALICE", SecretAccessKey: "alice-secret"},
		req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", env.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req.Body = io.NopCloser(bytes.NewReader(body))
	if err := req.Write(conn); err != nil {
		t.Fatalf("writing the body before reading the answer: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 507 || !strings.Contains(string(b), "InsufficientCapacity") {
		t.Fatalf("answer %d %s, want 507 InsufficientCapacity", resp.StatusCode, b)
	}
}
