package baseline

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
)

// The hashes an S3 server computes over every byte of a signed PUT: MD5
// for the object's ETag and SHA-256 of the payload the signature covers.
// One goroutine runs both over S3HashBody-byte bodies for the
// measurement's duration, as a gateway does for one request, while nothing
// else of the process runs (its CPU time is the measurement's). Its rate is
// what one core of a gateway can take in; its CPU per GiB is what any S3
// server spends on those two hashes before it stores a byte, so a PUT's
// CPU per GiB can be read against it.
const S3HashBody = 4 << 20

// runHashes measures s3_put_hashes.
func runHashes(ctx context.Context, o Options, r *Result) error {
	o.Progress(fmt.Sprintf("cpu: MD5 and SHA-256 of %d MiB bodies, one core", S3HashBody>>20))
	body := make([]byte, S3HashBody)
	fillRandom(body, rand.New(rand.NewPCG(seed, 7)))
	cpu0 := processCPU()
	var sink byte
	m, err := run(ctx, o.Duration, 1, S3HashBody, func(*worker) error {
		md, sh := md5.Sum(body), sha256.Sum256(body)
		sink ^= md[0] ^ sh[0]
		return nil
	}, nil)
	if err != nil {
		return err
	}
	cpu1 := processCPU()
	if gib := float64(m.Ops) * S3HashBody / (1 << 30); gib > 0 {
		m.CPUPerGiB = (cpu1 - cpu0).Seconds() / gib
	}
	r.CPU.S3PutHashes = m
	return nil
}
