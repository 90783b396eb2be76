#!/usr/bin/env bash
# local-sockets.sh: the same cairn bench workloads on a cairn dev (3 hosts x
# 2 OSDs) whose processes reach the OSDs over their local sockets (the
# default on one host) and on one that keeps them on loopback TCP
# (--local-sockets=false), a fresh cluster each time, the two alternating
# ROUNDS times (the order swapped each round). Workloads: 4 KiB writes at 16
# and 1 in flight and 4 MiB writes then sequential reads on the 3-copy pool,
# 4 MiB writes then reads and 4 KiB writes on a 2+1 pool. One table:
# medians of IOPS or MiB/s, the OSDs' CPU (cairn bench's cluster CPU) and
# p50 latency, local/TCP.
#
#   bench/local-sockets.sh
#   ROUNDS=5 DURATION=15s bench/local-sockets.sh
#
# Environment: ROUNDS=3, DURATION=8s (each cairn bench run),
# WORKDIR=/tmp/cairn-local-sockets, CAIRN_ETCD_PORT=25990 CAIRN_OSD_PORT=28990
# CAIRN_NBD_PORT=22009. Needs go, python3.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8s}
WORKDIR=${WORKDIR:-/tmp/cairn-local-sockets}
CAIRN_ETCD_PORT=${CAIRN_ETCD_PORT:-25990}
CAIRN_OSD_PORT=${CAIRN_OSD_PORT:-28990}
CAIRN_NBD_PORT=${CAIRN_NBD_PORT:-22009}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BENCH=local-sockets
. "$REPO/bench/lib.sh"
for t in go python3; do command -v $t >/dev/null || die "$t is not installed"; done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a whole number, got '$ROUNDS'"

dev_cleanup_traps
mkdir -p "$WORKDIR"
bin=$WORKDIR/cairn
build_rev . "$bin"
results=$WORKDIR/results.tsv
: >"$results"

# run MODE NAME POOL ARGS...: one cairn bench run; a line of $results.
run() {
	local mode=$1 name=$2 pool=$3
	shift 3
	"$bin" --conf "$WORKDIR/dev/cairn.conf" bench "$pool" "$@" -d "$DURATION" --json 2>/dev/null |
		python3 -c "import json,sys; j=json.load(sys.stdin); assert j['errors']==0, 'errors'; print('\t'.join(map(str,['$mode','$name',j['iops']['avg'],j['bandwidth_mib_s']['avg'],j['cpu']['seconds_per_gib'],j['cpu']['seconds_per_1000_ops'],j['latency_us']['p50']])))" \
			>>"$results" || die "$name ($mode) failed"
	log "$mode: $name: $(tail -1 "$results" | cut -f3-)"
}

# suite MODE: a fresh cluster, every workload, the cluster stopped.
suite() {
	local mode=$1 c="$bin --conf $WORKDIR/dev/cairn.conf"
	DEV_FLAGS=$([[ $mode == tcp ]] && echo --local-sockets=false || true) start_dev "$bin" 2
	CAIRN_EXPERIMENTAL_EC=1 $c pool create ec21 --ec 2+1 >/dev/null
	run "$mode" "3-copy 4 KiB write" default write -b 4K
	run "$mode" "3-copy 4 KiB write, 1 in flight" default write -b 4K -t 1
	run "$mode" "3-copy 4 MiB write" default write -b 4M --no-cleanup
	run "$mode" "3-copy 4 MiB seq read" default seq -b 4M
	$c bench default cleanup >/dev/null 2>&1
	run "$mode" "2+1 4 MiB write" ec21 write -b 4M --no-cleanup
	run "$mode" "2+1 4 MiB seq read" ec21 seq -b 4M
	$c bench ec21 cleanup >/dev/null 2>&1
	run "$mode" "2+1 4 KiB write" ec21 write -b 4K
	stop_dev
}

for round in $(seq "$ROUNDS"); do
	order="local tcp"
	((round % 2 == 0)) && order="tcp local"
	for mode in $order; do
		log "round $round: $mode"
		suite "$mode"
	done
done

python3 - "$results" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(lambda: collections.defaultdict(list))
order = []
for line in open(sys.argv[1]):
    mode, name, iops, mibs, gib, kops, p50 = line.rstrip("\n").split("\t")
    if name not in order:
        order.append(name)
    big = "MiB" in name
    d[name][mode].append((float(mibs if big else iops), float(gib if big else kops), float(p50)))
med = statistics.median
print("| workload | local sockets | TCP | local/TCP | OSD CPU local | OSD CPU TCP | p50 µs local | p50 µs TCP |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for name in order:
    l, t = d[name]["local"], d[name]["tcp"]
    unit, cpu = ("MiB/s", "s/GiB") if "MiB" in name else ("IOPS", "s/1000 ops")
    lv, tv = med(x[0] for x in l), med(x[0] for x in t)
    print(f"| {name} ({unit}) | {lv:,.1f} | {tv:,.1f} | {lv / tv:.2f} | {med(x[1] for x in l):.3f} {cpu} | "
          f"{med(x[1] for x in t):.3f} | {med(x[2] for x in l):,.0f} | {med(x[2] for x in t):,.0f} |")
print(f"\nmedians of {len(l)} rounds each, fresh clusters, alternating")
PY
