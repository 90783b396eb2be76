#!/usr/bin/env bash
# s3-vs-minio.sh: cairn's S3 gateway next to MinIO on this machine. One
# cairn dev cluster (4 hosts × 1 OSD, the gateway's pool 3 copies; with
# DATA_EC the bucket's data erasure-coded K+M instead) and one
# MinIO server (4 drives, erasure-coded as MinIO sets 4 drives up by
# default), both on 127.0.0.1 with their data on the same disk, stay up
# while bench/s3load runs the same phases on each in turn: PUT then GET of
# 4 MiB objects, then of 4 KiB objects, CLIENTS clients, DURATION each.
# Within a round every phase runs on one side and then at once on the
# other, and the order swaps from round to round, so load from elsewhere on
# the machine tends to hit both. With MINIO_NODES=4, MinIO runs as 4
# servers of one drive each instead (its distributed setup, every server
# on 127.0.0.1 on a port of its own): the same 2+2 code, and like cairn's
# 4 hosts it then survives losing servers, not only drives; the clients
# all talk to the first server, as cairn's all talk to its one gateway.
# A third target, s3load's null endpoint (stores nothing, checks
# nothing), gives the floor: what the load generator and HTTP over
# loopback alone reach on this machine.
#
#   bench/s3-vs-minio.sh
#   MINIO=/path/to/minio ROUNDS=3 DURATION=10s bench/s3-vs-minio.sh
#
# Environment:
#   MINIO=minio from PATH   the MinIO server binary
#                          (get one: go install github.com/minio/minio@latest)
#   ROUNDS=2 DURATION=10s CLIENTS=16
#   SETTLE=3 SETTLE_MAX=60 IDLE_CORES=0.2: between phases, wait SETTLE
#                          seconds, then up to SETTLE_MAX more until both
#                          servers use under IDLE_CORES; what a server
#                          spends meanwhile is charged to its last phase
#   DATA_EC=               K+M (e.g. 2+2, MinIO's layout on 4 drives): cairn's
#                          bucket keeps its data in an erasure-coded pool of
#                          that code (cairn dev --s3-data-ec, one shard per
#                          host, 256 KiB chunks; its index stays in the
#                          3-copy pool s3)
#   MINIO_NODES=1          1: one MinIO server with 4 drives; 4: four
#                          servers of one drive each (ports MINIO_PORT+2i,
#                          consoles MINIO_PORT+2i+1)
#   MAX_GIB=2              a 4 MiB PUT phase stops after this much data
#   MAX_SMALL=200000       a 4 KiB PUT phase stops after this many objects
#   FLOOR=1                0: skip the null endpoint
#   BASELINE=1             0: skip cairn bench --baseline (about 35 s, before
#                          the servers start: the floors on this machine of
#                          the disk, of replicated and erasure-coded writes,
#                          and of the hashes of a signed PUT)
#   WORKDIR=/tmp/cairn-s3-vs-minio   (results stay in WORKDIR/results)
#   KEEP=0                 1: leave both servers' data behind
#   CAIRN_ETCD_PORT=24990 CAIRN_OSD_PORT=27990 CAIRN_S3_PORT=19000
#   MINIO_PORT=19100 (its console on the next port) NULL_PORT=19190
# Needs go, python3 and curl. The servers' CPU is utime+stime from
# /proc/PID/stat of cairn's mon, OSDs and gateway (DIR/dev.json) and of the
# MinIO processes, read by s3load before and after each phase.
set -euo pipefail

ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-10s}
CLIENTS=${CLIENTS:-16}
SETTLE=${SETTLE:-3}
SETTLE_MAX=${SETTLE_MAX:-60}
IDLE_CORES=${IDLE_CORES:-0.2}
MAX_GIB=${MAX_GIB:-2}
DATA_EC=${DATA_EC:-}
MAX_SMALL=${MAX_SMALL:-200000}
FLOOR=${FLOOR:-1}
BASELINE=${BASELINE:-1}
KEEP=${KEEP:-0}
WORKDIR=${WORKDIR:-/tmp/cairn-s3-vs-minio}
CAIRN_ETCD_PORT=${CAIRN_ETCD_PORT:-24990}
CAIRN_OSD_PORT=${CAIRN_OSD_PORT:-27990}
CAIRN_S3_PORT=${CAIRN_S3_PORT:-19000}
MINIO_PORT=${MINIO_PORT:-19100}
NULL_PORT=${NULL_PORT:-19190}
MINIO_NODES=${MINIO_NODES:-1}
MINIO=${MINIO:-$(command -v minio || true)}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=$REPO/bin/cairn
LOAD=$REPO/bin/s3load
CLK_TCK=$(getconf CLK_TCK)

BENCH=s3-vs-minio
. "$REPO/bench/lib.sh"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a whole number, got '$ROUNDS'"
[[ $MAX_GIB =~ ^[1-9][0-9]*$ ]] || die "MAX_GIB must be a whole number of GiB, got '$MAX_GIB'"
[[ $MINIO_NODES = 1 || $MINIO_NODES = 4 ]] || die "MINIO_NODES must be 1 (one server, 4 drives) or 4 (4 servers of one drive), got '$MINIO_NODES'"
[[ -z $DATA_EC || $DATA_EC =~ ^[1-9][0-9]*\+[1-9][0-9]*$ ]] || die "DATA_EC must be K+M (e.g. 2+2), got '$DATA_EC'"
if [ -z "$MINIO" ] || [ ! -x "$MINIO" ]; then
	die "no MinIO server binary: set MINIO=/path/to/minio or put minio on PATH; build one with: go install github.com/minio/minio@latest (about 5 minutes; it lands in \$(go env GOPATH)/bin)"
fi
command -v python3 >/dev/null || die "needs python3"
command -v curl >/dev/null || die "needs curl"

devpid= miniopids= nullpid=
# stop_pid ends one process this script started: SIGTERM, then SIGKILL.
stop_pid() {
	local pid=$1
	[ -n "$pid" ] || return 0
	kill "$pid" 2>/dev/null || true
	for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
	kill -9 "$pid" 2>/dev/null || true
}
cleanup() {
	local osds=
	[ -f "$WORKDIR/cairn/dev.json" ] && osds=$(server_pids "$WORKDIR/cairn/dev.json" | tr , ' ' || true)
	stop_pid "$devpid"
	for p in $osds; do stop_pid "$p"; done # in case cairn dev could not stop them
	for p in ${miniopids//,/ }; do stop_pid "$p"; done
	stop_pid "$nullpid"
	if [ "$KEEP" != 1 ]; then rm -rf "$WORKDIR/cairn" "$WORKDIR/minio" "$WORKDIR/baseline"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# server_pids lists cairn's mon, OSDs and S3 gateway from dev.json.
server_pids() {
	python3 -c 'import json,sys
ps=json.load(open(sys.argv[1]))["processes"]
print(",".join(str(p["pid"]) for p in ps if p["name"] in ("mon.a","s3") or p["name"].startswith("osd.")))' "$1"
}

# check_space refuses to start without room for every round's 4 MiB
# objects: cairn keeps 3 copies (with DATA_EC, (K+M)/K times the data,
# rounded up), and a deleted object's data until the gateway's GC grace
# (15 min) has passed, so its rounds add up; MinIO keeps 2 (data + parity)
# and frees them at once. cairn's OSDs also refuse new data once the
# filesystem is 95% used.
check_space() {
	mkdir -p "$WORKDIR"
	local avail total need copies=3
	if [ -n "$DATA_EC" ]; then
		local k=${DATA_EC%+*} m=${DATA_EC#*+}
		copies=$(((k + m + k - 1) / k))
	fi
	avail=$(df -B1G --output=avail "$WORKDIR" | tail -1 | tr -d ' ')
	total=$(df -B1G --output=size "$WORKDIR" | tail -1 | tr -d ' ')
	need=$((ROUNDS * MAX_GIB * copies + MAX_GIB * 2 + 2 + total / 20))
	log "disk: ${avail} GiB free, this run needs up to ${need} GiB (5% of the filesystem kept free)"
	[ "$avail" -ge "$need" ] || die "not enough free space under $WORKDIR: ${avail} GiB, need ${need} GiB (lower MAX_GIB or ROUNDS)"
}

# start_cairn runs cairn dev with 4 hosts of one OSD each; with DATA_EC its
# gateway keeps new buckets' data (s3load's) in the erasure-coded pool s3ec.
start_cairn() {
	local ec=()
	if [ -n "$DATA_EC" ]; then
		ec=(--s3-data-pool s3ec --s3-data-ec "$DATA_EC")
		export CAIRN_EXPERIMENTAL_EC=1 # erasure-coded pools are still experimental
	fi
	"$BIN" dev --dir "$WORKDIR/cairn" --hosts 4 --osds-per-host 1 --etcd-port "$CAIRN_ETCD_PORT" \
		--osd-port "$CAIRN_OSD_PORT" --s3-port "$CAIRN_S3_PORT" --nbd-port 0 --metrics-port 0 \
		--dashboard-port 0 "${ec[@]}" >"$WORKDIR/results/cairn-dev.out" 2>&1 &
	devpid=$!
	for _ in $(seq 600); do
		grep -q "is up" "$WORKDIR/results/cairn-dev.out" && [ -f "$WORKDIR/cairn/s3.json" ] && return 0
		kill -0 "$devpid" 2>/dev/null || break
		sleep 0.2
	done
	cat "$WORKDIR/results/cairn-dev.out" >&2
	die "cairn dev did not come up"
}

# start_minio runs MinIO as its documentation's single-node multi-drive
# setup: 4 drive directories, one erasure set, the default storage class;
# with MINIO_NODES=4, as its multi-node setup, one drive per server. MinIO
# refuses drives on the root filesystem; a root-drive threshold of 1 MiB
# (only drives that small count as root) lets it use directories on this
# machine's one disk, as cairn's OSDs do, and changes nothing else. In a
# container MinIO waits for an endpoint on 127.0.0.1 to resolve elsewhere;
# _MINIO_SERVER_LOCAL names each server's own endpoint instead.
start_minio() {
	mkdir -p "$WORKDIR"/minio/d{1,2,3,4}
	local i port drives=("$WORKDIR/minio/d{1...4}")
	if [ "$MINIO_NODES" = 4 ]; then
		drives=()
		for i in 1 2 3 4; do drives+=("http://127.0.0.1:$((MINIO_PORT + 2 * (i - 1)))$WORKDIR/minio/d$i"); done
	fi
	for i in $(seq "$MINIO_NODES"); do
		port=$((MINIO_PORT + 2 * (i - 1)))
		_MINIO_SERVER_LOCAL=127.0.0.1:$port MINIO_ROOT_USER=s3vsminio MINIO_ROOT_PASSWORD=s3vsminio-secret \
			MINIO_UPDATE=off MINIO_ROOTDRIVE_THRESHOLD_SIZE=1MiB \
			"$MINIO" server --address "127.0.0.1:$port" --console-address "127.0.0.1:$((port + 1))" \
			"${drives[@]}" >"$WORKDIR/results/minio-$i.out" 2>&1 &
		miniopids+=${miniopids:+,}$!
	done
	for _ in $(seq 300); do
		curl -sf "http://127.0.0.1:$MINIO_PORT/minio/health/cluster" >/dev/null && break
		for i in ${miniopids//,/ }; do
			kill -0 "$i" 2>/dev/null || { cat "$WORKDIR"/results/minio-*.out >&2; die "minio exited"; }
		done
		sleep 0.2
	done
	curl -sf "http://127.0.0.1:$MINIO_PORT/minio/health/cluster" >/dev/null || die "minio did not come up"
	printf '{"endpoint": "http://127.0.0.1:%s", "access_key": "s3vsminio", "secret_key": "s3vsminio-secret"}\n' \
		"$MINIO_PORT" >"$WORKDIR/minio.json"
}

start_null() {
	"$LOAD" -null-listen "127.0.0.1:$NULL_PORT" >"$WORKDIR/results/null.out" 2>&1 &
	nullpid=$!
	printf '{"endpoint": "http://127.0.0.1:%s", "access_key": "x", "secret_key": "x"}\n' "$NULL_PORT" >"$WORKDIR/null.json"
}

# creds_of and pids_of name each target's endpoint file and server pids.
creds_of() {
	case $1 in cairn) echo "$WORKDIR/cairn/s3.json" ;; minio) echo "$WORKDIR/minio.json" ;; null) echo "$WORKDIR/null.json" ;; esac
}
pids_of() {
	case $1 in cairn) server_pids "$WORKDIR/cairn/dev.json" ;; minio) echo "$miniopids" ;; null) echo "$nullpid" ;; esac
}

# front_of names the process each target's clients talk to: cairn's
# gateway, the first MinIO server.
front_of() {
	case $1 in
	cairn) python3 -c 'import json,sys; print(*(p["pid"] for p in json.load(open(sys.argv[1]))["processes"] if p["name"] == "s3"))' "$WORKDIR/cairn/dev.json" ;;
	minio) echo "${miniopids%%,*}" ;;
	null) echo "$nullpid" ;;
	esac
}

# minio_layout shows how MinIO stored the first object of a put phase:
# one shard file (or an inline xl.meta) per drive is its erasure coding.
minio_layout() {
	(cd "$WORKDIR/minio" && find d1 d2 d3 d4 -path "*/s3load/$1/00000000/*" -type f -printf '%p %s bytes\n' | sort)
}

# minio_setup names MinIO's setup for the report.
minio_setup() {
	if [ "$MINIO_NODES" = 4 ]; then echo "4 servers of one drive each"; else echo "4 drives of one server"; fi
}

# cairn_layout shows where cairn keeps s3load's bucket: its data pool
# (cairn s3 bucket ls) and that pool's code (cairn pool ls).
cairn_layout() {
	"$BIN" --conf "$WORKDIR/cairn/cairn.conf" s3 bucket ls
	"$BIN" --conf "$WORKDIR/cairn/cairn.conf" pool ls
}

# settle waits SETTLE seconds, then until both servers are idle (at most
# SETTLE_MAX more), and appends what each spent meanwhile to results.jsonl
# as a "settle" record charged to its last phase: work a server defers
# (flushes, compactions, deletes) counts against what caused it, and no
# phase starts while the other server is still busy.
settle() {
	python3 - "$CLK_TCK" "$SETTLE" "$SETTLE_MAX" "$IDLE_CORES" "cairn=$(pids_of cairn)" "minio=$miniopids" \
		"${last[cairn]:-}" "${last[minio]:-}" >>"$WORKDIR/results/results.jsonl" <<'PY'
import json, sys, time
tck, settle, most, idle = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
groups = [a.split("=", 1) for a in sys.argv[5:7]]
lasts = sys.argv[7:9]
def ticks(pids):
    t = 0
    for p in pids.split(","):
        f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        t += int(f[11]) + int(f[12])
    return t
start = [ticks(p) for _, p in groups]
t0 = time.time()
time.sleep(settle)
while time.time() - t0 < settle + most:
    a = [ticks(p) for _, p in groups]
    time.sleep(1)
    b = [ticks(p) for _, p in groups]
    if all((y - x) / tck < idle for x, y in zip(a, b)):
        break
end = [ticks(p) for _, p in groups]
for (name, _), s, e, last in zip(groups, start, end, lasts):
    if last:
        r, op, size = last.split()
        print(json.dumps({"label": name, "op": "settle", "round": int(r), "of_op": op, "of_size": int(size),
                          "cpu_s": (e - s) / tck, "waited_s": round(time.time() - t0, 1)}))
PY
}

# phase runs one s3load phase on one target and appends its JSON, tagged
# with the round, to results.jsonl. $1 target, $2 round, $3 op, $4 size,
# $5 prefix, $6 objects (get and delete) or the cap (put).
phase() {
	local t=$1 r=$2 op=$3 size=$4 prefix=$5 n=$6 extra=()
	case $op in put) extra=(-max-objects "$n") ;; *) extra=(-objects "$n") ;; esac
	settle
	local out
	out=$("$LOAD" -creds "$(creds_of "$t")" -bucket s3load -prefix "$prefix" -op "$op" -size "$size" \
		-clients "$CLIENTS" -duration "$DURATION" -pids "$(pids_of "$t")" -front-pids "$(front_of "$t")" -clk-tck "$CLK_TCK" \
		-label "$t" -json "${extra[@]}") || die "s3load $op $size on $t failed: $out"
	python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["round"]=int(sys.argv[2]); print(json.dumps(r))' \
		"$out" "$r" >>"$WORKDIR/results/results.jsonl"
	log "round $r $t $op $size: $(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("%d objects, %.1f/s, %.1f MiB/s, p50 %.1f ms, p99 %.1f ms, server CPU %.2f s" % (r["objects"], r["objects_per_s"], r["mib_per_s"], r["p50_ms"], r["p99_ms"], r["server_cpu_s"]))' "$out")"
	if [ "$t" = minio ] && [ "$op" = put ] && [ ! -f "$WORKDIR/results/minio-layout.txt" ]; then
		minio_layout "$prefix" >"$WORKDIR/results/minio-layout.txt"
	fi
	if [ "$t" = cairn ] && [ "$op" = put ] && [ ! -f "$WORKDIR/results/cairn-layout.txt" ]; then
		cairn_layout >"$WORKDIR/results/cairn-layout.txt"
	fi
	[ "$t" = null ] || last[$t]="$r $op $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["size"])' "$out")"
	[ "$op" != put ] || written[$t]=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["objects"])' "$out")
}

declare -A written last
# run_size runs PUT, GET and delete of one object size on every target,
# each step on all targets back to back.
run_size() { # $1 round, $2 size, $3 prefix, $4 put cap, then the targets in order
	local r=$1 size=$2 prefix=$3 cap=$4 t
	shift 4
	for t in "$@"; do phase "$t" "$r" put "$size" "$prefix" "$cap"; done
	for t in "$@"; do phase "$t" "$r" get "$size" "$prefix" "${written[$t]}"; done
	for t in "$@"; do phase "$t" "$r" delete "$size" "$prefix" "${written[$t]}"; done
}

# idle_cpu prints the cores each group of pids (NAME=PID,PID) uses over
# 5 s with no load: the background cost every phase of that side includes.
idle_cpu() {
	python3 - "$CLK_TCK" "$@" <<'PY'
import sys, time
tck = int(sys.argv[1])
groups = [a.split("=", 1) for a in sys.argv[2:]]
def ticks(pids):
    t = 0
    for p in pids.split(","):
        f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        t += int(f[11]) + int(f[12])
    return t
before = [ticks(p) for _, p in groups]
time.sleep(5)
for (name, p), b in zip(groups, before):
    print(f"{name}: {(ticks(p) - b) / tck / 5:.3f} cores idle")
PY
}

# report turns results.jsonl into the markdown tables: per round and
# workload, each side's rates, latencies and CPU, and cairn/MinIO ratios.
report() {
	python3 - "$1" <<'PY'
import json, statistics, sys
allrows = [json.loads(l) for l in open(sys.argv[1])]
rows = [x for x in allrows if x["op"] != "settle"]
def get(t, r, op, size):
    for x in rows:
        if x["label"] == t and x["round"] == r and x["op"] == op and x["size"] == size:
            return x
def after(x):
    """The CPU x's server spent settling after it, charged to x."""
    return sum(s["cpu_s"] for s in allrows if s["op"] == "settle" and s["label"] == x["label"]
               and s["round"] == x["round"] and s["of_op"] == x["op"] and s["of_size"] == x["size"])
def cost(x):
    """Server CPU per GiB and per 1,000 objects, the settling after the phase included."""
    cpu = x["server_cpu_s"] + after(x)
    gib = x["objects"] * x["size"] / 2**30
    return cpu / gib, cpu / x["objects"] * 1000
work = [("put", 4 << 20, "4 MiB PUT"), ("get", 4 << 20, "4 MiB GET"), ("put", 4096, "4 KiB PUT"), ("get", 4096, "4 KiB GET")]
rounds = sorted({x["round"] for x in rows})
floor = any(x["label"] == "null" for x in rows)
def perf(x):
    return f"{x['objects_per_s']:,.1f} | {x['mib_per_s']:,.1f} | {x['p50_ms']:.1f} | {x['p99_ms']:.1f}" if x else "n/a | n/a | n/a | n/a"
print("Throughput and latency (objects/s, MiB/s, p50 ms, p99 ms); ratio = cairn/MinIO objects/s, above 1: cairn faster")
print()
h = "| round | workload | cairn obj/s | MiB/s | p50 | p99 | MinIO obj/s | MiB/s | p50 | p99 | cairn/MinIO |"
print(h + (" floor obj/s | floor MiB/s |" if floor else ""))
print("|---" * (h.count("|") - 1 + (2 if floor else 0)) + "|")
ratios = {w[2]: [] for w in work}
for r in rounds:
    for op, size, name in work:
        c, m, n = get("cairn", r, op, size), get("minio", r, op, size), get("null", r, op, size)
        ratio = c["objects_per_s"] / m["objects_per_s"] if c and m and m["objects_per_s"] else float("nan")
        ratios[name].append(ratio)
        line = f"| {r} | {name} | {perf(c)} | {perf(m)} | {ratio:.2f} |"
        if floor:
            line += f" {n['objects_per_s']:,.1f} | {n['mib_per_s']:,.1f} |" if n else " n/a | n/a |"
        print(line)
print()
print("Server CPU (utime+stime of the server processes during the phase, plus what they spent settling after it until idle, shown as 'after'): seconds per GiB moved and per 1,000 objects, and cores busy during the phase; ratio = cairn/MinIO CPU per object, below 1: cairn cheaper. Client: s3load's own CPU per GiB.")
print()
print("| round | workload | cairn s/GiB | s/1000 ops | cores | after s | MinIO s/GiB | s/1000 ops | cores | after s | CPU cairn/MinIO | client s/GiB cairn | client s/GiB MinIO |")
print("|---" * 13 + "|")
cpur = {w[2]: [] for w in work}
for r in rounds:
    for op, size, name in work:
        c, m = get("cairn", r, op, size), get("minio", r, op, size)
        if not (c and m):
            continue
        (cg, co), (mg, mo) = cost(c), cost(m)
        cr = co / mo if mo else float("nan")
        cpur[name].append(cr)
        print(f"| {r} | {name} | {cg:.2f} | {co:.3f} | {c['server_cores']:.2f} | {after(c):.2f} | "
              f"{mg:.2f} | {mo:.3f} | {m['server_cores']:.2f} | {after(m):.2f} | {cr:.2f} | "
              f"{c['client_cpu_s_per_gib']:.2f} | {m['client_cpu_s_per_gib']:.2f} |")
print()
print("Where the 4 MiB phases' server CPU goes, seconds per GiB (the phase only, not the settling after it): in the process the clients talk to (cairn's gateway; the MinIO server, or with 4 the first) and in the others (cairn's OSDs and mon; the other MinIO servers).")
print()
print("| round | workload | cairn gateway | cairn OSDs, mon | MinIO front | MinIO others |")
print("|---|---|---|---|---|---|")
def split(x):
    if not x or "front_cpu_s" not in x:
        return "n/a | n/a"
    gib = x["objects"] * x["size"] / 2**30
    return f"{x['front_cpu_s'] / gib:.2f} | {(x['server_cpu_s'] - x['front_cpu_s']) / gib:.2f}"
for r in rounds:
    for op, size, name in work[:2]:
        print(f"| {r} | {name} | {split(get('cairn', r, op, size))} | {split(get('minio', r, op, size))} |")
print()
print("Deleting each round's objects (DeleteObjects, 500 keys a request, CLIENTS in parallel), objects/s:")
print()
print("| round | size | cairn | MinIO |")
print("|---|---|---|---|")
for r in rounds:
    for size in (4 << 20, 4096):
        c, m = get("cairn", r, "delete", size), get("minio", r, "delete", size)
        f = lambda x: f"{x['objects_per_s']:,.0f}" if x else "n/a"
        print(f"| {r} | {'4 MiB' if size > 4096 else '4 KiB'} | {f(c)} | {f(m)} |")
print()
print("Medians over the rounds: cairn/MinIO objects/s, and cairn/MinIO server CPU per object")
print()
print("| workload | throughput cairn/MinIO | CPU per object cairn/MinIO |")
print("|---|---|---|")
for _, _, name in work:
    t = [x for x in ratios[name] if x == x]
    c = [x for x in cpur[name] if x == x]
    fmt = lambda v: f"{statistics.median(v):.2f} ({', '.join(f'{x:.2f}' for x in v)})" if v else "n/a"
    print(f"| {name} | {fmt(t)} | {fmt(c)} |")
PY
}

check_space
rm -rf "$WORKDIR/cairn" "$WORKDIR/minio" "$WORKDIR/results"
mkdir -p "$WORKDIR/results"
log "building cairn and s3load"
(cd "$REPO" && go build -o bin/cairn ./cmd/cairn && go build -o bin/s3load ./bench/s3load)
"$MINIO" --version >"$WORKDIR/results/minio-version.txt" 2>&1 || true
if [ "$BASELINE" = 1 ]; then
	log "cairn bench --baseline (about 35 s)"
	mkdir -p "$WORKDIR/baseline"
	"$BIN" bench --baseline "$WORKDIR/baseline" >"$WORKDIR/results/baseline.txt" 2>&1 ||
		die "cairn bench --baseline failed: $(tail -3 "$WORKDIR/results/baseline.txt")"
	rm -rf "$WORKDIR/baseline"
fi
start_cairn
start_minio
[ "$FLOOR" = 1 ] && start_null
settle
log "cairn pids $(pids_of cairn), minio pids $miniopids; idle CPU over 5 s:"
idle_cpu "cairn=$(pids_of cairn)" "minio=$miniopids" | tee "$WORKDIR/results/idle.txt" >&2

for r in $(seq "$ROUNDS"); do
	order=(cairn minio)
	[ $((r % 2)) = 0 ] && order=(minio cairn)
	[ "$FLOOR" = 1 ] && order+=(null)
	log "round $r: ${order[*]}"
	run_size "$r" 4MiB "r$r-large" $((MAX_GIB * 256)) "${order[@]}"
	run_size "$r" 4KiB "r$r-small" "$MAX_SMALL" "${order[@]}"
done
settle

{
	if [ -n "$DATA_EC" ]; then
		printf "cairn's bucket data: erasure-coded %s in pool s3ec (index: pool s3, 3 copies); MinIO: EC 2+2 on %s\n\n" "$DATA_EC" "$(minio_setup)"
	else
		printf "cairn's bucket data: 3 copies in pool s3; MinIO: EC 2+2 on %s\n\n" "$(minio_setup)"
	fi
	report "$WORKDIR/results/results.jsonl"
	if [ -f "$WORKDIR/results/baseline.txt" ]; then
		printf '\nFloors from cairn bench --baseline (copies on this disk doing nothing but moving, checking and syncing the bytes; the hashes every S3 server computes over a signed PUT):\n\n```\n'
		grep -E '^(write_4k_qd1|write_4m|sync_write_4k_qd1|seq_write_1m|s3_put_hashes)|(replicated write|erasure code|PUT hashes) +[0-9.]+ s/GiB' "$WORKDIR/results/baseline.txt" || true
		printf '```\n'
	fi
	printf '\nIdle CPU before the runs:\n\n```\n%s\n```\n' "$(cat "$WORKDIR/results/idle.txt")"
} | tee "$WORKDIR/results/results.md"
log "results in $WORKDIR/results (results.md, results.jsonl)"
