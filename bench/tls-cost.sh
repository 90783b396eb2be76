#!/usr/bin/env bash
# tls-cost.sh: what encrypting the cluster's traffic costs. One dev cluster
# (3 hosts × 2 OSDs, 3 copies) is started plain and with --tls in turn, on
# the same directory, ROUNDS times each, and cairn bench runs the same four
# jobs on each: 4 KiB and 4 MiB writes, then random 4 KiB and sequential
# 4 MiB reads of what they wrote. One table: the median of each mode and
# tls/plain ratios (throughput, and the OSDs' CPU per GiB and per 1000 ops).
#
#   bench/tls-cost.sh
#
# Environment:
#   DURATION=10s   per job
#   ROUNDS=2       plain, tls, plain, tls, ...
#   WORKDIR=/tmp/cairn-tls-cost
#   CAIRN_ETCD_PORT=24890 CAIRN_OSD_PORT=27900
# Needs go and python3.
set -euo pipefail

DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-2}
WORKDIR=${WORKDIR:-/tmp/cairn-tls-cost}
CAIRN_ETCD_PORT=${CAIRN_ETCD_PORT:-24890}
CAIRN_OSD_PORT=${CAIRN_OSD_PORT:-27900}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=$REPO/bin/cairn

BENCH=tls-cost
. "$REPO/bench/lib.sh"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a whole number, got '$ROUNDS'"

devpid=
stop_dev() {
	[ -n "$devpid" ] || return 0
	kill "$devpid" 2>/dev/null || true
	for _ in $(seq 100); do kill -0 "$devpid" 2>/dev/null || break; sleep 0.2; done
	kill -9 "$devpid" 2>/dev/null || true
	devpid=
}
trap 'stop_dev; rm -rf "$WORKDIR"' EXIT

(cd "$REPO" && go build -o bin/cairn ./cmd/cairn)
rm -rf "$WORKDIR"
mkdir -p "$WORKDIR/results"

start_dev() { # $1: plain or tls
	local flags=()
	[ "$1" = tls ] && flags=(--tls)
	"$BIN" dev --dir "$WORKDIR/dev" --etcd-port "$CAIRN_ETCD_PORT" --osd-port "$CAIRN_OSD_PORT" \
		--nbd-port 0 --s3-port 0 --metrics-port 0 --dashboard-port 0 "${flags[@]}" >"$WORKDIR/dev.out" 2>&1 &
	devpid=$!
	for _ in $(seq 600); do
		grep -q "is up" "$WORKDIR/dev.out" && return 0
		kill -0 "$devpid" 2>/dev/null || break
		sleep 0.2
	done
	cat "$WORKDIR/dev.out" >&2
	log "cairn dev did not come up"
	exit 1
}

run_jobs() { # $1: mode, $2: round
	local conf=$WORKDIR/dev/cairn.conf out=$WORKDIR/results/$1-$2
	"$BIN" --conf "$conf" status >/dev/null
	"$BIN" --conf "$conf" bench default write -b 4K -t 16 -d "$DURATION" --no-cleanup --run-name s --json >"$out-write4k.json" 2>/dev/null
	"$BIN" --conf "$conf" bench default rand -b 4K -t 16 -d "$DURATION" --run-name s --json >"$out-rand4k.json" 2>/dev/null
	"$BIN" --conf "$conf" bench default write -b 4M -t 16 -d "$DURATION" --no-cleanup --run-name l --json >"$out-write4m.json" 2>/dev/null
	"$BIN" --conf "$conf" bench default seq -b 4M -t 16 -d "$DURATION" --run-name l --json >"$out-seq4m.json" 2>/dev/null
	"$BIN" --conf "$conf" bench default cleanup --run-name s >/dev/null 2>&1
	"$BIN" --conf "$conf" bench default cleanup --run-name l >/dev/null 2>&1
}

for r in $(seq "$ROUNDS"); do
	for mode in plain tls; do
		log "round $r: $mode"
		start_dev "$mode"
		run_jobs "$mode" "$r"
		stop_dev
	done
done

python3 - "$WORKDIR/results" <<'PY'
import json, os, statistics, sys
d = sys.argv[1]
jobs = [("write4k", "4 KiB write"), ("rand4k", "4 KiB random read"), ("write4m", "4 MiB write"), ("seq4m", "4 MiB seq read")]
def runs(mode, job):
    out = []
    for f in sorted(os.listdir(d)):
        if f.startswith(mode + "-") and f.endswith("-" + job + ".json"):
            out.append(json.load(open(os.path.join(d, f))))
    return out
def med(rs, key):
    v = [key(r) for r in rs if key(r) is not None]
    return statistics.median(v) if v else float("nan")
print("| job | plain | tls | tls/plain | OSD CPU plain | OSD CPU tls | CPU tls/plain |")
print("|---|---|---|---|---|---|---|")
for job, name in jobs:
    p, t = runs("plain", job), runs("tls", job)
    big = job.endswith("4m")
    val = (lambda r: r["bandwidth_mib_s"]["avg"]) if big else (lambda r: r["iops"]["avg"])
    cpu = (lambda r: (r.get("cpu") or {}).get("seconds_per_gib")) if big else (lambda r: (r.get("cpu") or {}).get("seconds_per_1000_ops"))
    unit, cunit = ("MiB/s", "s/GiB") if big else ("IOPS", "s/1000 ops")
    vp, vt, cp, ct = med(p, val), med(t, val), med(p, cpu), med(t, cpu)
    print(f"| {name} | {vp:,.0f} {unit} | {vt:,.0f} {unit} | {vt/vp:.2f} | {cp:.3f} {cunit} | {ct:.3f} {cunit} | {ct/cp:.2f} |")
PY
