# The two commands a newcomer needs: `make dev` and `make test`.
GO      ?= go
BIN     := bin/cairn
DEVDIR  ?= cairn-dev

.PHONY: build dev test test-short powercut fuzz bench bench-heal bench-s3 vet clean

build:
	$(GO) build -o $(BIN) ./cmd/cairn

# A local cluster: embedded etcd + 3 hosts x 2 OSDs on 127.0.0.1-3, data in $(DEVDIR).
dev: build
	./$(BIN) dev --dir $(DEVDIR)

# Every test: unit, property, fuzz seed corpora, crash tests and end-to-end
# tests that start real cluster processes. Recycled buffers are poisoned
# when handed back, so a use after that shows up as wrong data, and the
# expensive invariant checks are compiled in (-tags invariants). The
# end-to-end tests run two at a time (t.Parallel, -parallel defaults to the
# CPU count); those that time things or change the environment run alone
# first. The timeout is a guard, not the budget: the whole run takes about
# 15 minutes on 2 cores.
test:
	$(GO) vet ./...
	CAIRN_BUFPOOL_POISON=1 $(GO) test -tags invariants -count=1 -timeout 30m ./...

# Unit tests only (no cluster processes).
test-short:
	CAIRN_BUFPOOL_POISON=1 $(GO) test -count=1 -short ./...

# Power cuts of a whole dev cluster (e2e/powercut_test.go): its mon and
# OSDs on power-cut filesystems, one OSD cut alone during writes and
# recovery, then all cut at once, CUTS times (HARSH=1: some unsynced writes
# land, torn at sectors); every acknowledged write must read back. make test runs 2 cuts. Replay a cut with the seed it printed:
# POWERCUT_SEED=... CUTS=1.
CUTS ?= 50
powercut:
	CUTS=$(CUTS) HARSH=$(HARSH) $(GO) test -count=1 -v -timeout 4h -run '^TestPowerCutCluster$$' ./e2e/

# Run each fuzz target for FUZZTIME (default 20s).
FUZZTIME ?= 20s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

# Cluster benchmark: 4 KiB and 4 MiB objects, 16 in flight, against a dev cluster.
bench:
	$(GO) test -run '^$$' -bench BenchmarkCluster -benchtime 10s -timeout 30m ./e2e/

# Self-healing benchmark: kill an OSD of a cluster holding 1 GiB, time the
# backfill to HEALTH_OK and client 4 KiB write IOPS during it.
bench-heal:
	$(GO) test -run '^$$' -bench BenchmarkRecovery -benchtime 1x -timeout 30m ./e2e/

# The S3 gateway next to MinIO on this machine (bench/s3-vs-minio.sh): PUT
# and GET of 4 MiB and 4 KiB objects, 16 clients, alternating rounds. Needs
# a minio binary in $MINIO or on PATH (go install github.com/minio/minio@latest).
bench-s3:
	bench/s3-vs-minio.sh

clean:
	rm -rf bin $(DEVDIR)
