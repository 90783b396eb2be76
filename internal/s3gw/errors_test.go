package s3gw

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
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
