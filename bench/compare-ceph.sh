#!/usr/bin/env bash
# compare-ceph.sh: run the same object workloads against a local Ceph cluster
# (Debian's ceph 16.2, 1 mon + 1 mgr + 3 BlueStore OSDs) and a local cairn dev
# cluster (3 OSDs on 3 "hosts"), both keeping 3 copies on this machine's one
# disk, and print a side-by-side table. See bench/README.md.
#
#   sudo bench/compare-ceph.sh
#
# Environment:
#   DURATION=20        seconds per workload and system
#   WORKDIR=/tmp/cairn-vs-ceph
#   KEEP=0             1: leave the Ceph and cairn data directories behind
#   ONLY=              "ceph" or "cairn": run one side only
#   THREADS=16         operations in flight for the throughput workloads
#   SETTLE=3           seconds of idle between two benchmark runs
#   SETTLE_MAX=60      then at most this many seconds more waiting for both
#                      clusters' daemons to fall below IDLE_CORES
#   IDLE_CORES=0.2     CPU (cores, over one second) under which they count as idle
#   DROP_CACHES=0      1: sync and drop the kernel page cache before each read run
#   MIN_FREE_GIB=5     stop a write run if the disk's free space falls below this
#   EST_CEPH_MIBS=320  assumed 4 MiB write rates, for the disk space estimate
#   EST_CAIRN_MIBS=800
#   CEPH_PG_NUM=128
#   CLEANUP_TIMEOUT=4×DURATION+60  seconds allowed to delete one run's objects
#   SUITES="objects block"  objects: rados bench vs cairn bench; block: fio's
#                      rbd engine on a Ceph RBD image vs fio's nbd engine on a
#                      cairn volume (and on nbdkit memory, if installed); ec:
#                      rados bench on a Ceph erasure-coded pool vs cairn bench
#                      on a cairn one (EC_PROFILE, one shard per OSD);
#                      ecblock: the block suite's 4 KiB fio jobs on an RBD
#                      image whose data pool is that erasure-coded pool
#                      (allow_ec_overwrites) vs a cairn volume on the cairn
#                      one, and cairn's 3-copy volume's 4 KiB randwrite QD16
#   EC_PROFILE=2+1     K+M of the ec and ecblock suites' pools (K+M at most the 3 OSDs)
#   CAIRN_LOCAL_SOCKETS=1  0: cairn dev --local-sockets=false, cairn's processes
#                      on loopback TCP as Ceph's are (by default, as on any
#                      one host, they reach the OSDs over Unix sockets)
#   FIO_IMAGE_MIB=1024 size of the RBD image / cairn volume the fio jobs use
#   CAIRN_NBD_PORT=20909 NBDKIT_PORT=20910
#   CAIRN_S3_PORT=9000 CAIRN_DASHBOARD_PORT=8080 CAIRN_METRICS_PORT=9300
#                      the rest of the cairn dev cluster's ports (its defaults)
set -euo pipefail

DURATION=${DURATION:-20}
WORKDIR=${WORKDIR:-/tmp/cairn-vs-ceph}
KEEP=${KEEP:-0}
ONLY=${ONLY:-}
THREADS=${THREADS:-16}
SETTLE=${SETTLE:-3}
SETTLE_MAX=${SETTLE_MAX:-60}
IDLE_CORES=${IDLE_CORES:-0.2}
DROP_CACHES=${DROP_CACHES:-0}
MIN_FREE_GIB=${MIN_FREE_GIB:-5}
EST_CEPH_MIBS=${EST_CEPH_MIBS:-320}
EST_CAIRN_MIBS=${EST_CAIRN_MIBS:-800}
CEPH_PG_NUM=${CEPH_PG_NUM:-128}
CEPH_MON_V2_PORT=${CEPH_MON_V2_PORT:-13300}
CEPH_MON_V1_PORT=${CEPH_MON_V1_PORT:-16789}
CEPH_OSD_PORT_MIN=${CEPH_OSD_PORT_MIN:-16800}
CAIRN_ETCD_PORT=${CAIRN_ETCD_PORT:-23790}
CAIRN_OSD_PORT=${CAIRN_OSD_PORT:-26800}
CAIRN_LEASE_TTL=${CAIRN_LEASE_TTL:-10s}
CAIRN_NBD_PORT=${CAIRN_NBD_PORT:-20909}
NBDKIT_PORT=${NBDKIT_PORT:-20910}
CAIRN_S3_PORT=${CAIRN_S3_PORT:-9000}
CAIRN_DASHBOARD_PORT=${CAIRN_DASHBOARD_PORT:-8080}
CAIRN_METRICS_PORT=${CAIRN_METRICS_PORT:-9300}
SUITES=${SUITES:-objects block}
EC_PROFILE=${EC_PROFILE:-2+1}
FIO_IMAGE_MIB=${FIO_IMAGE_MIB:-1024}

REPO=$(cd "$(dirname "$0")/.." && pwd)
NOSDS=3
CEPH_POOL=bench
CAIRN_POOL=default
EC_POOL=bench-ec # the ec and ecblock suites' pool, on both sides

BENCH=compare-ceph
. "$REPO/bench/lib.sh"

# --- argument checks -------------------------------------------------------

[[ $DURATION =~ ^[1-9][0-9]*$ ]] || die "DURATION must be a whole number of seconds, got '$DURATION'"
[[ $THREADS =~ ^[1-9][0-9]*$ ]] || die "THREADS must be a positive integer, got '$THREADS'"
[[ $SETTLE =~ ^[0-9]+$ ]] || die "SETTLE must be a whole number of seconds, got '$SETTLE'"
[[ $SETTLE_MAX =~ ^[0-9]+$ ]] || die "SETTLE_MAX must be a whole number of seconds, got '$SETTLE_MAX'"
[[ $IDLE_CORES =~ ^[0-9]*\.?[0-9]+$ ]] || die "IDLE_CORES must be a number of cores such as 0.2, got '$IDLE_CORES'"
for suite in $SUITES; do
	[[ $suite == objects || $suite == block || $suite == ec || $suite == ecblock ]] ||
		die "SUITES holds 'objects', 'block', 'ec' and/or 'ecblock', got '$SUITES'"
done
# suite NAME: SUITES has NAME.
suite() { [[ " $SUITES " == *" $1 "* ]]; }
[[ $EC_PROFILE =~ ^([1-9])\+([1-9])$ ]] || die "EC_PROFILE must be K+M such as 2+1, got '$EC_PROFILE'"
EC_K=${BASH_REMATCH[1]}
EC_M=${BASH_REMATCH[2]}
if { suite ec || suite ecblock; } && ((EC_K + EC_M > 3)); then
	die "EC_PROFILE $EC_PROFILE needs $((EC_K + EC_M)) OSDs, one per shard; both clusters here have 3"
fi
[[ $FIO_IMAGE_MIB =~ ^[1-9][0-9]*$ ]] || die "FIO_IMAGE_MIB must be a positive number of MiB, got '$FIO_IMAGE_MIB'"
case $ONLY in
"" | ceph | cairn) ;;
*) die "ONLY must be empty, 'ceph' or 'cairn', got '$ONLY'" ;;
esac
RUN_CEPH=1
RUN_CAIRN=1
if [[ $ONLY == ceph ]]; then
	RUN_CAIRN=0
	log "ONLY=ceph: skipping cairn; its columns will say 'skipped'"
elif [[ $ONLY == cairn ]]; then
	RUN_CEPH=0
	log "ONLY=cairn: skipping Ceph; its columns will say 'skipped'"
fi

# --- state used by the cleanup trap -----------------------------------------

CAIRN_DIR="$WORKDIR/cairn-dev"
CAIRN_CONF="$CAIRN_DIR/cairn.conf"
CAIRN_DEV_PID=""
CAIRN_OSD_PIDS=()
BENCH_PID=""
LOCK_FD=""

cleanup() {
	local rc=$?
	set +e
	trap - EXIT INT TERM
	if [[ -n $BENCH_PID ]]; then
		stop_pids 5 "$BENCH_PID"
	fi
	if [[ -n ${NBDKIT_PID:-} ]]; then
		stop_pids 5 "$NBDKIT_PID"
	fi
	if [[ -n $CAIRN_DEV_PID ]]; then
		log "stopping the cairn dev cluster (pid $CAIRN_DEV_PID)"
		# cairn dev stops its own children on SIGTERM; its OSD pids are
		# killed here too in case it could not.
		stop_pids 30 "$CAIRN_DEV_PID"
		local left=()
		if [[ -r $CAIRN_DIR/dev.json ]]; then
			mapfile -t left < <(python3 -c 'import json,sys
for p in json.load(open(sys.argv[1]))["processes"]: print(p["pid"])' "$CAIRN_DIR/dev.json" 2>/dev/null)
		fi
		((${#left[@]})) && stop_pids 10 "${left[@]}"
	fi
	ceph_stop
	if [[ $KEEP == 1 ]]; then
		log "KEEP=1: leaving ${CEPH_DIR:-(no Ceph dir)} and $CAIRN_DIR"
	else
		local removed=0
		if [[ -n $CEPH_DIR && -d $CEPH_DIR ]]; then
			removed=1
			# Keep the (small) logs, drop the BlueStore files and the mon store.
			mkdir -p "$WORKDIR/logs/ceph" && cp -f "$CEPH_DIR"/log/*.log "$WORKDIR/logs/ceph/" 2>/dev/null
			rm -rf "$CEPH_DIR"
		fi
		if [[ -d $CAIRN_DIR ]]; then
			removed=1
			mkdir -p "$WORKDIR/logs/cairn" && cp -f "$CAIRN_DIR"/*.log "$WORKDIR/logs/cairn/" 2>/dev/null
			rm -rf "$CAIRN_DIR"
		fi
		((removed)) && log "removed the cluster data; logs are in $WORKDIR/logs"
	fi
	if ((rc != 0)); then
		log "exiting with status $rc"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- tools ------------------------------------------------------------------

mkdir -p "$WORKDIR"
WORKDIR=$(cd "$WORKDIR" && pwd)
CAIRN_DIR="$WORKDIR/cairn-dev"
CAIRN_CONF="$CAIRN_DIR/cairn.conf"
exec {LOCK_FD}>"$WORKDIR/.lock"
flock -n "$LOCK_FD" || die "another compare-ceph.sh is using $WORKDIR"

need_root() { [[ $(id -u) == 0 ]] || die "$1: run as root (sudo bench/compare-ceph.sh)"; }

if ! command -v python3 >/dev/null; then
	need_root "python3 is missing"
	log "installing python3"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 >/dev/null
fi
if ((RUN_CEPH)); then
	missing=()
	for t in ceph-mon ceph-mgr ceph-osd ceph monmaptool ceph-authtool rados rbd; do
		command -v "$t" >/dev/null || missing+=("$t")
	done
	if ((${#missing[@]})); then
		need_root "Ceph tools missing (${missing[*]})"
		log "installing Debian's ceph packages (about 45 s)"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ceph >/dev/null
	fi
fi

CLK_TCK=$(getconf CLK_TCK)

# The Python helper: parses benchmark output, Ceph status, builds the report.
HELPER="$WORKDIR/.compare-ceph-helper.py"
cat >"$HELPER" <<'PY'
import json, math, re, sys

def num(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None

def get(d, *path):
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return num(d)

def cpu_figures(cpu_s, ops, nbytes):
    per_gib = cpu_s / (nbytes / 2**30) if cpu_s is not None and nbytes else None
    per_kops = cpu_s / ops * 1000 if cpu_s is not None and ops else None
    return per_gib, per_kops

def rados_field(txt, label):
    m = re.search(r"^" + re.escape(label) + r":\s*(\S+)", txt, re.M)
    return num(m.group(1)) if m else None

def first(*vals):
    for v in vals:
        if v is not None:
            return v
    return None

def client_cpu(times_path, nbytes):
    """The bench client's own CPU (bash `times`, its children's line), and per GiB."""
    try:
        lines = open(times_path).read().split("\n")
        secs = sum(int(m) * 60 + float(s) for m, s in re.findall(r"(\d+)m([\d.]+)s", lines[1]))
    except (OSError, IndexError, ValueError):
        return None, None
    return secs, (secs / (nbytes / 2**30) if nbytes else None)

def record_ceph(raw, workload, path, ticks, clk, rc, times_path=""):
    txt = open(path, errors="replace").read()
    ops = first(rados_field(txt, "Total writes made"), rados_field(txt, "Total reads made"))
    size = first(rados_field(txt, "Write size"), rados_field(txt, "Read size"))
    secs = rados_field(txt, "Total time run")
    nbytes = ops * size if ops is not None and size is not None else None
    us = lambda v: v * 1e6 if v is not None else None
    cpu_s = int(ticks) / int(clk) if ticks != "" else None
    per_gib, per_kops = cpu_figures(cpu_s, ops, nbytes)
    # rados bench's "MB/sec" is bytes / 2^20 per second, i.e. MiB/s.
    r = dict(system="ceph", workload=workload, status="ok" if rc == "0" and ops else "failed",
             ops=ops, bytes=nbytes, seconds=secs,
             mib_s=rados_field(txt, "Bandwidth (MB/sec)"), iops=rados_field(txt, "Average IOPS"),
             lat_avg_us=us(rados_field(txt, "Average Latency(s)")),
             lat_p50_us=None, lat_p99_us=None,  # rados bench prints no percentiles
             lat_max_us=us(rados_field(txt, "Max latency(s)")),
             lat_min_us=us(rados_field(txt, "Min latency(s)")),
             cpu_s=cpu_s, cpu_s_per_gib=per_gib, cpu_s_per_1000_ops=per_kops,
             cpu_source="/proc of the ceph-osd processes", exit_code=int(rc), output=path)
    r["client_cpu_s"], r["client_cpu_s_per_gib"] = client_cpu(times_path, nbytes)
    with open(raw, "a") as f:
        f.write(json.dumps(r) + "\n")
    return r

def record_cairn(raw, workload, path, ticks, clk, rc, times_path=""):
    txt = open(path, errors="replace").read()
    j = None
    try:
        j = json.loads(txt)
    except ValueError:
        a, b = txt.find("{"), txt.rfind("}")
        if a >= 0 and b > a:
            try:
                j = json.loads(txt[a:b + 1])
            except ValueError:
                j = None
    j = j if isinstance(j, dict) else {}
    ops, nbytes = get(j, "ops"), get(j, "bytes")
    proc_s = int(ticks) / int(clk) if ticks != "" else None
    proc_gib, proc_kops = cpu_figures(proc_s, ops, nbytes)
    json_s = get(j, "cpu", "cluster_seconds")
    json_gib = get(j, "cpu", "seconds_per_gib")
    json_kops = get(j, "cpu", "seconds_per_1000_ops")
    if json_gib is None or json_kops is None:
        g, k = cpu_figures(json_s, ops, nbytes)
        json_gib, json_kops = first(json_gib, g), first(json_kops, k)
    r = dict(system="cairn", workload=workload,
             # cairn bench exits 1 when operations failed but still prints its
             # summary: keep the figures and say so in a note.
             status="ok" if ops and (rc == "0" or get(j, "errors")) else "failed",
             ops=ops, bytes=nbytes, seconds=get(j, "seconds"),
             mib_s=get(j, "bandwidth_mib_s", "avg"), iops=get(j, "iops", "avg"),
             lat_avg_us=get(j, "latency_us", "avg"), lat_p50_us=get(j, "latency_us", "p50"),
             lat_p99_us=get(j, "latency_us", "p99"), lat_max_us=get(j, "latency_us", "max"),
             lat_min_us=get(j, "latency_us", "min"), errors=get(j, "errors"),
             cpu_s=json_s, cpu_s_per_gib=json_gib, cpu_s_per_1000_ops=json_kops,
             cpu_source="cairn bench --json (cpu.cluster_seconds)",
             proc_cpu_s=proc_s, proc_cpu_s_per_gib=proc_gib, proc_cpu_s_per_1000_ops=proc_kops,
             exit_code=int(rc), output=path, cairn_json=j)
    r["client_cpu_s"], r["client_cpu_s_per_gib"] = client_cpu(times_path, nbytes)
    if get(j, "errors"):
        r["note"] = f"cairn {workload}: {get(j, 'errors'):.0f} operations failed during the run"
    with open(raw, "a") as f:
        f.write(json.dumps(r) + "\n")
    return r

def record_cleanup(raw, system, workload, path, secs, rc):
    txt = open(path, errors="replace").read()
    m = re.search(r"[Rr]emoved (\d+) objects", txt)
    n = int(m.group(1)) if m else None
    secs = num(secs)
    status = "ok" if rc == "0" else ("timed out" if rc == "124" else "failed")
    r = dict(system=system, workload=workload, status=status, objects=n, seconds=secs,
             deletes_per_s=n / secs if n and secs else None, exit_code=int(rc), output=path)
    with open(raw, "a") as f:
        f.write(json.dumps(r) + "\n")
    if status == "ok":
        print(f"{system} {workload}: {n} objects in {secs:.1f} s ({fmt(r['deletes_per_s'])}/s)")
    else:
        print(f"{system} {workload}: {status} after {secs:.1f} s (exit {rc}); see {path}")

def record_fio(raw, system, workload, path, ticks, clk, rc):
    r = dict(system=system, workload=workload, status="failed", exit_code=int(rc), output=path)
    try:
        text = open(path, errors="replace").read()
        j = json.loads(text[text.index("{"):])["jobs"][0]  # fio may print notes first
    except (ValueError, KeyError, IndexError):
        j = None
    if rc == "0" and j and not j.get("error"):
        side = j["write"] if j["write"]["io_bytes"] else j["read"]
        pct = side["clat_ns"].get("percentile", {})
        ops, nbytes = side["total_ios"], side["io_bytes"]
        cpu_s = int(ticks) / int(clk) if ticks != "" else None
        per_gib, per_kops = cpu_figures(cpu_s, ops, nbytes)
        r.update(status="ok", ops=ops, bytes=nbytes, seconds=side["runtime"] / 1e3,
                 iops=side["iops"], mib_s=side["bw_bytes"] / 2**20, lat_avg_us=side["lat_ns"]["mean"] / 1e3,
                 lat_p50_us=num(pct.get("50.000000")) / 1e3 if pct.get("50.000000") else None,
                 lat_p99_us=num(pct.get("99.000000")) / 1e3 if pct.get("99.000000") else None,
                 cpu_s=cpu_s, cpu_s_per_gib=per_gib, cpu_s_per_1000_ops=per_kops)
    with open(raw, "a") as f:
        f.write(json.dumps(r) + "\n")
    return r

BLOCK_ROWS = [
    ("fio-randwrite-4k-qd1", "4 KiB randwrite, QD1 (IOPS)", "iops", 0, True),
    ("fio-randwrite-4k-qd1", "4 KiB randwrite, QD1: p50 latency (µs)", "lat_p50_us", 0, False),
    ("fio-randwrite-4k-qd16", "4 KiB randwrite, QD16 (IOPS)", "iops", 0, True),
    ("fio-randread-4k-qd16", "4 KiB randread, QD16 (IOPS)", "iops", 0, True),
    ("fio-write-1m-qd4", "1 MiB seq write, QD4 (MiB/s)", "mib_s", 0, True),
    ("fio-read-1m-qd4", "1 MiB seq read, QD4 (MiB/s)", "mib_s", 0, True),
]

def block_table(recs, systems=("ceph", "cairn", "nbdkit"),
                title="Block volumes: fio rbd (Ceph RBD, rbd_cache off) vs fio nbd (cairn volume)",
                heads=("Ceph RBD", "cairn", "nbdkit memory", "cairn / nbdkit"),
                note="nbdkit memory is the cost of the NBD protocol alone on this machine (the ratio there is cairn's, "
                     "<1 means slower than memory)."):
    """The fio jobs that ran on SYSTEMS (Ceph's, cairn's and a third target
    cairn's figures are compared with), one row per figure."""
    ran = lambda wl: any((s, wl) in recs for s in systems)
    if not any(ran(wl) for wl, *_ in BLOCK_ROWS):
        return []
    out = [f"## {title}", "",
           f"| job | {heads[0]} | {heads[1]} | ratio (>1: cairn better) | {heads[2]} | {heads[3]} | Ceph OSD CPU s/GiB | cairn OSD CPU s/GiB |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    def val(r, key, digits):
        if r is None:
            return "not run", None
        if r.get("status") != "ok":
            return r.get("status", "failed"), None
        return fmt(r.get(key), digits), r.get(key)
    done = set()
    for wl, label, key, digits, higher in BLOCK_ROWS:
        if not ran(wl):
            continue
        c, k, m = (recs.get((s, wl)) for s in systems)
        cs, cv = val(c, key, digits)
        ks, kv = val(k, key, digits)
        ms, mv = val(m, key, digits)
        ratio = lambda a, b: f"{(a / b if higher else b / a):.2f}×" if a and b else "n/a"
        cpu = lambda r: fmt_cpu(r.get("cpu_s_per_gib")) if r and r.get("status") == "ok" and wl not in done else ("″" if wl in done else "n/a")
        out.append(f"| {label} | {cs} | {ks} | {ratio(kv, cv)} | {ms} | {ratio(kv, mv)} | {cpu(c)} | {cpu(k)} |")
        done.add(wl)
    out += ["", "Same fio jobs, same run, alternating. CPU: utime+stime of the OSD processes only (librbd runs "
            "inside fio, cairn's client inside `cairn nbd`). " + note, ""]
    return out

def ecblock_table(recs):
    return block_table(recs, ("ceph-ec", "cairn-ec", "cairn-3copy"),
                       "Block volumes on erasure-coded pools: fio rbd (Ceph RBD image, its data pool erasure-coded with "
                       "allow_ec_overwrites, rbd_cache off) vs fio nbd (cairn volume in an erasure-coded pool)",
                       ("Ceph RBD, EC data pool", "cairn EC volume", "cairn 3-copy volume", "cairn EC / 3-copy"),
                       "The 3-copy volume ran right after the erasure-coded one (same cluster, same run); the ratio "
                       "there is the erasure-coded volume's against it.")

def ec_volume_ratio(recs):
    """The line that closes the report when the ecblock suite ran on cairn."""
    e, r = recs.get(("cairn-ec", "fio-randwrite-4k-qd16")), recs.get(("cairn-3copy", "fio-randwrite-4k-qd16"))
    if not e or not r:
        return None
    ev = e.get("iops") if e.get("status") == "ok" else None
    rv = r.get("iops") if r.get("status") == "ok" else None
    return f"cairn ec-volume/3-copy-volume 4K randwrite QD16 ratio: {ev / rv:.2f}" if ev and rv else \
        "cairn ec-volume/3-copy-volume 4K randwrite QD16 ratio: n/a (a run failed)"

def record_status(raw, system, workload, status, note):
    with open(raw, "a") as f:
        f.write(json.dumps(dict(system=system, workload=workload, status=status, note=note)) + "\n")

def fmt(v, digits=0):
    if v is None:
        return "n/a"
    if digits == 0:
        return f"{v:,.0f}"
    return f"{v:,.{digits}f}"

def fmt_cpu(v):
    if v is None:
        return "n/a"
    return f"{v:.3g}" if v < 100 else f"{v:,.0f}"

ROWS = [
    ("write-4m", "4 MiB write, %d in flight (MiB/s)", "mib_s", 1, True),
    ("seq-4m", "4 MiB seq read, %d in flight (MiB/s)", "mib_s", 1, True),
    ("rand-4m", "4 MiB rand read, %d in flight (MiB/s)", "mib_s", 1, True),
    ("write-4k", "4 KiB write, %d in flight (IOPS)", "iops", 0, True),
    ("seq-4k", "4 KiB seq read, %d in flight (IOPS)", "iops", 0, True),
    ("rand-4k", "4 KiB rand read, %d in flight (IOPS)", "iops", 0, True),
    ("write-4k-qd1", "4 KiB write, 1 in flight: avg latency (µs)", "lat_avg_us", 0, False),
    ("write-4k-qd1", "4 KiB write, 1 in flight: p99 latency (µs)", "lat_p99_us", 0, False),
    ("ec-write-4m", "erasure-coded: 4 MiB write, %d in flight (MiB/s)", "mib_s", 1, True),
    ("ec-seq-4m", "erasure-coded: 4 MiB seq read, %d in flight (MiB/s)", "mib_s", 1, True),
    ("ec-rand-4m", "erasure-coded: 4 MiB rand read, %d in flight (MiB/s)", "mib_s", 1, True),
    ("ec-write-4k", "erasure-coded: 4 KiB write, %d in flight (IOPS)", "iops", 0, True),
    ("ec-rand-4k", "erasure-coded: 4 KiB rand read, %d in flight (IOPS)", "iops", 0, True),
]

def floor_line(b, recs):
    """What the machine allows (cairn bench --baseline), and each system's
    4 MiB write CPU against the floor."""
    if not b:
        return ""
    bound = b.get("bound") or {}
    fl, w, ws = num(bound.get("replicated_write_cpu_s_per_gib")), num(bound.get("replicated_write_us")), num(bound.get("replicated_write_shared_disk_us"))
    wm = num(bound.get("replicated_write_measured_us"))
    out = (f"Hardware bounds here (`cairn bench --baseline`, before the clusters started): a replicated 4 KiB write "
           f"{fmt(w, 1)} µs, {fmt(ws, 1)} µs with every copy on this one disk")
    if wm:
        out += f", {fmt(wm, 1)} µs (p50) done by three processes that do only that work"
        k = recs.get(("cairn", "write-4k-qd1"))
        kv = num(k.get("lat_p50_us")) if k and k.get("status") == "ok" else None
        if kv:
            out += f"; cairn's 1-in-flight 4 KiB writes took {fmt(kv)} µs p50, {kv / wm:.2f}× that"
    out += "."
    if fl:
        out += (f" CPU floor of replicated 4 MiB writes: {fmt(fl, 2)} s/GiB (three processes that only move, check, "
                f"write and sync the bytes)")
        parts = []
        for system, name in (("ceph", "Ceph"), ("cairn", "cairn")):
            r = recs.get((system, "write-4m"))
            v = num(r.get("cpu_s_per_gib")) if r and r.get("status") == "ok" else None
            if v:
                parts.append(f"{name} {v / fl:.2f}×")
        c = recs.get(("ceph", "write-4m"))
        cv = num(c.get("cpu_s_per_gib")) if c and c.get("status") == "ok" else None
        if parts:
            out += "; the 4 MiB write run's CPU: " + ", ".join(parts) + " the floor"
        if cv:
            out += f"; a third of Ceph's is {cv / 3 / fl:.2f}× the floor"
        out += "."
    return out

def ec_line(b, recs, profile):
    """The erasure-coded runs against the erasure floor and against
    cairn's own 3-copy writes (an erasure-coded write moves fewer bytes)."""
    ok = lambda r: r and r.get("status") == "ok"
    out = []
    fl = num(((b or {}).get("bound") or {}).get("ec_write_cpu_s_per_gib"))
    if fl:
        parts = []
        for system, name in (("ceph", "Ceph"), ("cairn", "cairn")):
            r = recs.get((system, "ec-write-4m"))
            v = num(r.get("cpu_s_per_gib")) if ok(r) else None
            if v:
                parts.append(f"{name} {v / fl:.2f}×")
                c = num(r.get("client_cpu_s_per_gib"))
                if system == "cairn" and c:
                    # cairn's client codes its puts and sends the shards:
                    # the floor's primary does that work.
                    parts[-1] += f" ({(v + c) / fl:.2f}× with its client, which codes the objects)"
        out.append(f"CPU floor of {profile} erasure-coded 4 MiB writes: {fmt(fl, 2)} s/GiB (processes that only code, move, "
                   f"check, write and sync the shards)" + ("; the erasure-coded 4 MiB write run's CPU: " + ", ".join(parts) + " the floor" if parts else "") + ".")
    e, r = recs.get(("cairn", "ec-write-4m")), recs.get(("cairn", "write-4m"))
    if ok(e) and ok(r) and num(r.get("mib_s")):
        out.append(f"cairn's {profile} 4 MiB writes ran at {fmt(e.get('mib_s'), 1)} MiB/s, {num(e.get('mib_s')) / num(r.get('mib_s')):.2f}× "
                   f"its 3-copy 4 MiB writes ({fmt(r.get('mib_s'), 1)} MiB/s) in the same run.")
    return " ".join(out)

def load(raw):
    """The records of raw.jsonl by (system, workload), the last one of each."""
    recs = {}
    for line in open(raw):
        line = line.strip()
        if line:
            r = json.loads(line)
            recs[(r["system"], r["workload"])] = r
    return recs

def report(raw, md_path, json_path, meta_path):
    recs = load(raw)
    meta = json.load(open(meta_path))
    threads = meta.get("threads", 16)

    def cell(r, key, digits):
        if r is None:
            return "not run", None
        if r.get("status") != "ok":
            return r.get("status", "failed"), None
        v = r.get(key)
        return fmt(v, digits), v

    lines = ["| workload | Ceph | cairn | ratio (>1: cairn better) | Ceph CPU s/GiB | cairn CPU s/GiB | Ceph CPU s/1000 ops | cairn CPU s/1000 ops | Ceph client s/GiB | cairn client s/GiB |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    done = set()
    run = [row for row in ROWS if ("ceph", row[0]) in recs or ("cairn", row[0]) in recs]  # suites not run: no rows
    for wl, label, key, digits, higher in run:
        label = label % threads if "%d" in label else label
        c, k = recs.get(("ceph", wl)), recs.get(("cairn", wl))
        cs, cv = cell(c, key, digits)
        ks, kv = cell(k, key, digits)
        ratio = "n/a"
        if cv and kv:
            ratio = f"{(kv / cv if higher else cv / kv):.2f}×"
        cpu = lambda r, f: fmt_cpu(r.get(f)) if r and r.get("status") == "ok" else "n/a"
        if wl in done:  # a second figure of the same run: its CPU is in the row above
            cpu = lambda r, f: "″"
        done.add(wl)
        lines.append(f"| {label} | {cs} | {ks} | {ratio} | {cpu(c, 'cpu_s_per_gib')} | {cpu(k, 'cpu_s_per_gib')} "
                     f"| {cpu(c, 'cpu_s_per_1000_ops')} | {cpu(k, 'cpu_s_per_1000_ops')} "
                     f"| {cpu(c, 'client_cpu_s_per_gib')} | {cpu(k, 'client_cpu_s_per_gib')} |")

    detail = ["| workload | Ceph ops | Ceph s | Ceph avg / max lat (µs) | Ceph OSD CPU s (/proc) | cairn ops | cairn s | cairn avg / p50 / p99 lat (µs) | cairn CPU s (bench JSON) | cairn OSD CPU s (/proc) |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    seen = []
    for wl, *_ in run:
        if wl in seen:
            continue
        seen.append(wl)
        c, k = recs.get(("ceph", wl)) or {}, recs.get(("cairn", wl)) or {}
        g = lambda r, f, d=0: fmt(r.get(f), d) if r.get("status") == "ok" else r.get("status", "not run")
        detail.append(f"| {wl} | {g(c,'ops')} | {g(c,'seconds',1)} | {g(c,'lat_avg_us')} / {g(c,'lat_max_us')} | {g(c,'cpu_s',1)} "
                      f"| {g(k,'ops')} | {g(k,'seconds',1)} | {g(k,'lat_avg_us')} / {g(k,'lat_p50_us')} / {g(k,'lat_p99_us')} "
                      f"| {g(k,'cpu_s',1)} | {g(k,'proc_cpu_s',1)} |")

    cleanups = ["| cleanup (delete the run's objects, %d in flight) | Ceph | cairn |" % threads, "|---|---:|---:|"]
    for wl, what in (("cleanup-4m", "4 MiB objects"), ("cleanup-4k", "4 KiB objects"), ("cleanup-4k-qd1", "4 KiB objects of the 1-in-flight run"),
                     ("cleanup-ec-4m", "4 MiB objects, erasure-coded"), ("cleanup-ec-4k", "4 KiB objects, erasure-coded")):
        cells = []
        for system in ("ceph", "cairn"):
            r = recs.get((system, wl))
            if r is None:
                cells.append("not run")
            elif r.get("status") == "ok":
                cells.append(f"{fmt(r.get('objects'))} in {fmt(r.get('seconds'), 1)} s = {fmt(r.get('deletes_per_s'))}/s")
            else:
                cells.append(f"{r.get('status')} after {fmt(r.get('seconds'), 1)} s")
        if any(c != "not run" for c in cells):
            cleanups.append(f"| {what} | {cells[0]} | {cells[1]} |")
    idle = (f"Idle OSD CPU before the runs (both clusters stay up throughout): Ceph {fmt(meta.get('ceph_idle_osd_cores'), 3)} cores, "
            f"cairn {fmt(meta.get('cairn_idle_osd_cores'), 3)} cores; it is included in every CPU figure above.")
    floor = floor_line(meta.get("baseline"), recs)
    if floor:
        idle += "\n\n" + floor
    ec = ec_line(meta.get("baseline"), recs, meta.get("ec_profile", "K+M"))
    if ec:
        idle += "\n\n" + ec
    notes = list(dict.fromkeys(r.get("note") for r in recs.values() if r.get("note")))
    objects = [] if all(w.startswith("fio-") for (_, w) in recs) else [
          *lines, "",
          "Ratio: cairn/Ceph for MiB/s and IOPS, Ceph/cairn for latency. CPU: Ceph = utime+stime of the 3 ceph-osd "
          "processes over the run (/proc); cairn = the bench's own cpu.cluster_seconds (cross-checked below). "
          "Client: the CPU of the bench process itself (rados bench, cairn bench), which for cairn's erasure-coded "
          "puts includes coding the objects (its OSDs then do less). "
          "rados bench prints no latency percentiles, hence n/a.", "",
          "## Details", "", *detail, ""]
    md = [f"# cairn vs Ceph, {meta.get('date','')}", "",
          f"{meta.get('duration')} s per run, 3 OSDs, 3 copies (erasure-coded runs: code {meta.get('ec_profile')}, one shard per OSD), one disk, {meta.get('nproc')} CPUs; "
          f"Ceph {meta.get('ceph_version','n/a')} (OSD rotational={meta.get('ceph_rotational','n/a')}, "
          f"pg_num {meta.get('ceph_pg_num')}, loopback TCP); cairn {meta.get('cairn_version','n/a')}"
          + (f" ({meta['cairn_transport']} between its processes)" if meta.get('cairn_transport') else "") + ".", "",
          *objects, idle, "", *block_table(recs), *ecblock_table(recs)]
    if len(cleanups) > 2:
        md += cleanups + [""]
    if notes:
        md += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    line = ec_volume_ratio(recs)
    if line:
        md += [line, ""]
    with open(md_path, "w") as f:
        f.write("\n".join(md))
    out = dict(meta=meta, results=list(recs.values()))
    with open(json_path, "w") as f:
        json.dump(out, f, indent=2)
    print("\n".join(md))

if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "record-ceph":
        record_ceph(*args)
    elif cmd == "record-cairn":
        r = record_cairn(*args)
        if r["status"] == "ok":
            print(f"cpu: bench JSON {fmt(r['cpu_s'], 2)} s, /proc of cairn OSDs {fmt(r['proc_cpu_s'], 2)} s")
    elif cmd == "record-cleanup":
        record_cleanup(*args)
    elif cmd == "record-fio":
        record_fio(*args)
    elif cmd == "record-status":
        record_status(*args)
    elif cmd == "summary":
        r = json.loads(open(args[0]).readlines()[-1])
        if r.get("status") == "ok":
            print(f"{r['system']} {r['workload']}: {fmt(r.get('mib_s'), 1)} MiB/s, {fmt(r.get('iops'))} IOPS, "
                  f"avg lat {fmt(r.get('lat_avg_us'))} µs, p99 {fmt(r.get('lat_p99_us'))} µs, "
                  f"OSD CPU {fmt(r.get('cpu_s'), 2)} s = {fmt_cpu(r.get('cpu_s_per_gib'))} s/GiB, "
                  f"{fmt_cpu(r.get('cpu_s_per_1000_ops'))} s/1000 ops")
        else:
            print(f"{r['system']} {r['workload']}: {r.get('status')} {r.get('note', '')}")
    elif cmd == "report":
        report(*args)
    elif cmd == "ec-volume-ratio":
        line = ec_volume_ratio(load(args[0]))
        if line:
            print(line)
    else:
        sys.exit(f"unknown helper command {cmd}")
PY
helper() { python3 "$HELPER" "$@"; }

free_bytes() { df -B1 --output=avail "$WORKDIR" | tail -n 1 | tr -d ' '; }
gib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1073741824 }'; }

# --- disk space --------------------------------------------------------------

# Only the 4 MiB write run needs real space: every OSD keeps a full copy of what
# it writes (3 OSDs, 3 copies), BlueStore's sparse files never shrink, and the
# 4 KiB runs reuse what the 4 MiB cleanup freed. Both benchmarks also wait for
# what is in flight after DURATION, hence DURATION + 2. A watchdog stops a write
# run if the estimate was too low (MIN_FREE_GIB).
est_secs=$((DURATION + 2))
# Sparse BlueStore file per OSD: room for twice the estimate, at least 10 GiB.
CEPH_BLOCK_GIB=$(((EST_CEPH_MIBS * est_secs * 2 + 1023) / 1024 + 2))
((CEPH_BLOCK_GIB < 10)) && CEPH_BLOCK_GIB=10
need_gib=$MIN_FREE_GIB
full_gib=0
if suite block; then
	# Each system keeps 3 copies of the image.
	need_gib=$((need_gib + 2 * 3 * FIO_IMAGE_MIB / 1024 + 1))
fi
if suite ecblock; then
	# K+M/K of an image on each side (at most 1.5 for the 3 shards here, plus
	# what partial writes keep to roll back), and cairn's 3-copy volume.
	need_gib=$((need_gib + (2 + 2 + 3) * FIO_IMAGE_MIB / 1024 + 1))
fi
# The ecblock suite writes no 4 MiB objects: alone, it needs its images only.
writes_4m=0
for s in $SUITES; do
	[[ $s == ecblock ]] || writes_4m=1
done
if ((RUN_CEPH && writes_4m)); then
	ceph_gib=$((NOSDS * EST_CEPH_MIBS * est_secs * 110 / 100 / 1024 + 2))
	need_gib=$((need_gib + ceph_gib))
fi
if ((RUN_CAIRN)); then
	if ((writes_4m)); then
		cairn_gib=$((NOSDS * EST_CAIRN_MIBS * est_secs * 110 / 100 / 1024 + 2))
		need_gib=$((need_gib + cairn_gib))
	fi
	# cairn's OSDs refuse new data once their filesystem is 95% used
	# (clustermap.FullRatio), counted by the space left to non-root users;
	# here all of them share one filesystem. That much must stay free.
	full_gib=$(($(df --output=size -B1 "$WORKDIR" | tail -n 1) / 20 / 1073741824 + 1))
	((full_gib > MIN_FREE_GIB)) && need_gib=$((need_gib - MIN_FREE_GIB + full_gib))
fi
avail=$(free_bytes)
kept_gib=$((full_gib > MIN_FREE_GIB ? full_gib : MIN_FREE_GIB))
if ((writes_4m)); then
	log "disk: $(gib "$avail") GiB free on $(df --output=target "$WORKDIR" | tail -n 1); this run needs about $need_gib GiB" \
		"(Ceph ${ceph_gib:-0}, cairn ${cairn_gib:-0}, at $EST_CEPH_MIBS / $EST_CAIRN_MIBS MiB/s of 4 MiB writes for ${est_secs}s ×$NOSDS copies, plus $kept_gib GiB kept free)"
else
	log "disk: $(gib "$avail") GiB free on $(df --output=target "$WORKDIR" | tail -n 1); this run needs about $need_gib GiB" \
		"(the volumes' images, plus $kept_gib GiB kept free)"
fi
if ((avail < need_gib * 1073741824)); then
	die "not enough free disk space in $WORKDIR: $(gib "$avail") GiB free, about $need_gib GiB needed. Use a shorter DURATION (now $DURATION), another WORKDIR, or free space."
fi

# --- cairn build (early: a missing 'cairn bench' should fail before Ceph starts) ---

CAIRN="$WORKDIR/cairn"
CAIRN_VERSION="n/a"
if ((RUN_CAIRN)); then
	if ! command -v go >/dev/null && [[ -x /usr/local/go/bin/go ]]; then
		PATH="/usr/local/go/bin:$PATH"
	fi
	command -v go >/dev/null || die "go is not installed (needed to build cairn); or run ONLY=ceph"
	log "building cairn from $REPO"
	(cd "$REPO" && go build -o "$CAIRN" ./cmd/cairn) || die "go build ./cmd/cairn failed"
	if ! "$CAIRN" bench --help >/dev/null 2>&1; then
		die "this cairn build has no 'bench' command yet; run ONLY=ceph for the Ceph half only"
	fi
	CAIRN_VERSION=$(cd "$REPO" && git describe --always --dirty 2>/dev/null || echo unknown)
fi

RESULTS="$WORKDIR/results"
rm -rf "$RESULTS"
mkdir -p "$RESULTS"
RAW="$RESULTS/raw.jsonl"
: >"$RAW"

# What this machine allows, measured before either cluster starts: the
# latency bounds and the CPU floor of replicated 4 MiB writes (three copy
# processes that only move, check, write and sync the bytes). cairn bench
# then prints its efficiency against them; the report gives both systems'
# CPU against the floor.
BASELINE="$RESULTS/baseline.json"
if ((RUN_CAIRN)); then
	log "cairn bench --baseline $WORKDIR (about 30 s)"
	if ! "$CAIRN" --json bench --baseline "$WORKDIR" --baseline-file "$BASELINE" >/dev/null 2>"$RESULTS/baseline.err"; then
		log "the baseline failed (see $RESULTS/baseline.err); no floor in the report"
		rm -f "$BASELINE"
	fi
fi

# --- Ceph --------------------------------------------------------------------

start_ceph() {
	CEPH_DIR=$(mktemp -d "$WORKDIR/ceph.XXXXXX")
	CEPH_EXTRA_CONF="# Room for the erasure-coded pool of CEPH_PG_NUM PGs (the default, 250
# per OSD, refuses two pools of 128 PGs on 3 OSDs).
mon max pg per osd = 1000
# BlueStore on a sparse file per OSD; everything else is Ceph's default
# (including the HDD profile it picks because the virtio disk reports rotational).
bluestore block create = true
bluestore block size = $((CEPH_BLOCK_GIB * 1073741824))"
	log "Ceph: $NOSDS OSDs on sparse ${CEPH_BLOCK_GIB} GiB files"
	ceph_start
	ceph_pool_create "$CEPH_POOL" "$CEPH_PG_NUM" rados
	local pgs=$CEPH_PG_NUM
	if suite ec || suite ecblock; then
		# min_size stays Ceph's default for erasure-coded pools, K+1, as cairn's.
		local setup_log="$CEPH_DIR/log/setup.out"
		{
			ceph_cli osd erasure-code-profile set cairnbench "k=$EC_K" "m=$EC_M" crush-failure-domain=osd &&
				ceph_cli osd pool create "$EC_POOL" "$CEPH_PG_NUM" "$CEPH_PG_NUM" erasure cairnbench &&
				ceph_cli osd pool set "$EC_POOL" pg_autoscale_mode off &&
				ceph_cli osd pool application enable "$EC_POOL" rados
		} >>"$setup_log" 2>&1 || ceph_die "creating pool $EC_POOL failed: $(tail -n 3 "$setup_log")"
		pgs=$((pgs + CEPH_PG_NUM))
		log "Ceph: pool $EC_POOL (erasure code $EC_PROFILE, failure domain osd, pg_num $CEPH_PG_NUM)"
	fi
	log "Ceph: pool $CEPH_POOL (size 3, min_size 2, pg_num $CEPH_PG_NUM); waiting for $pgs PGs to be active+clean"
	ceph_wait 180 "$pgs"
	ceph_healthy
}

# --- cairn -------------------------------------------------------------------

start_cairn() {
	local p
	for p in "$CAIRN_ETCD_PORT" "$((CAIRN_ETCD_PORT + 1))" "$CAIRN_OSD_PORT" "$((CAIRN_OSD_PORT + 1))" "$((CAIRN_OSD_PORT + 2))" "$CAIRN_NBD_PORT" \
		"$CAIRN_S3_PORT" "$CAIRN_DASHBOARD_PORT"; do
		((p == 0)) || port_free "$p" ||
			die "port $p (cairn) is in use; set CAIRN_ETCD_PORT / CAIRN_OSD_PORT / CAIRN_NBD_PORT / CAIRN_S3_PORT / CAIRN_DASHBOARD_PORT"
	done
	if [[ -e $CAIRN_DIR ]]; then
		# Left by an earlier run with KEEP=1: cairn dev would restart it with its data.
		[[ -f $CAIRN_DIR/dev.json || -f $CAIRN_DIR/cairn.conf ]] ||
			die "$CAIRN_DIR exists and is not a cairn dev directory; remove it or set WORKDIR"
		log "removing the old cairn dev cluster in $CAIRN_DIR"
		rm -rf "$CAIRN_DIR"
	fi
	log "cairn: starting a dev cluster (3 hosts × 1 OSD, pool '$CAIRN_POOL' size 3) in $CAIRN_DIR"
	CAIRN_EXPERIMENTAL_EC=1 "$CAIRN" dev --dir "$CAIRN_DIR" --hosts 3 --osds-per-host 1 --etcd-port "$CAIRN_ETCD_PORT" \
		--osd-port "$CAIRN_OSD_PORT" --nbd-port "$CAIRN_NBD_PORT" --s3-port "$CAIRN_S3_PORT" --dashboard-port "$CAIRN_DASHBOARD_PORT" \
		--metrics-port "$CAIRN_METRICS_PORT" --lease-ttl "$CAIRN_LEASE_TTL" --local-sockets="$([[ ${CAIRN_LOCAL_SOCKETS:-1} == 0 ]] && echo false || echo true)" \
		>"$WORKDIR/cairn-dev.out" 2>&1 &
	CAIRN_DEV_PID=$!
	local deadline=$((SECONDS + 120))
	until grep -q "is up" "$WORKDIR/cairn-dev.out" 2>/dev/null; do
		if ! alive "$CAIRN_DEV_PID" || ((SECONDS >= deadline)); then
			tail -n 30 "$WORKDIR/cairn-dev.out" >&2
			local f
			for f in "$CAIRN_DIR"/*.log; do
				[[ -s $f ]] && printf '\n--- last lines of %s ---\n' "$f" >&2 && tail -n 15 "$f" >&2
			done
			die "the cairn dev cluster did not come up (see above and $WORKDIR/cairn-dev.out)"
		fi
		sleep 0.5
	done
	mapfile -t CAIRN_OSD_PIDS < <(python3 -c 'import json,sys
for p in json.load(open(sys.argv[1]))["processes"]:
    if p["name"].startswith("osd."): print(p["pid"])' "$CAIRN_DIR/dev.json")
	((${#CAIRN_OSD_PIDS[@]} == NOSDS)) || die "expected $NOSDS cairn OSDs in $CAIRN_DIR/dev.json, found ${#CAIRN_OSD_PIDS[@]}"
	# Beside cairn.conf, where cairn bench looks for it.
	[[ -f $BASELINE ]] && cp "$BASELINE" "$CAIRN_DIR/baseline.json"
	log "cairn: up, dev pid $CAIRN_DEV_PID, osd pids ${CAIRN_OSD_PIDS[*]}"
	if suite ec || suite ecblock; then
		CAIRN_EXPERIMENTAL_EC=1 "$CAIRN" --conf "$CAIRN_CONF" pool create "$EC_POOL" --ec "$EC_PROFILE" >"$WORKDIR/cairn-ec-pool.out" 2>&1 ||
			die "cairn pool create $EC_POOL --ec $EC_PROFILE failed: $(cat "$WORKDIR/cairn-ec-pool.out")"
		cairn_wait_ok 120
		log "cairn: pool $EC_POOL (erasure code $EC_PROFILE, one shard per host)"
	fi
}

# cairn_wait_ok SECONDS: wait until cairn status says HEALTH_OK.
cairn_wait_ok() {
	local deadline=$((SECONDS + $1))
	until "$CAIRN" --conf "$CAIRN_CONF" status 2>/dev/null | grep -q HEALTH_OK; do
		((SECONDS < deadline)) || die "cairn is not HEALTH_OK after $1 s: $("$CAIRN" --conf "$CAIRN_CONF" status 2>&1 | head -n 20)"
		sleep 1
	done
}

# --- measuring -----------------------------------------------------------------

# cpu_ticks PID...: sum of utime+stime over the processes, in clock ticks.
cpu_ticks() {
	local p s total=0 f
	for p in "$@"; do
		s=$(cat "/proc/$p/stat" 2>/dev/null) || {
			echo ""
			return 0
		}
		read -ra f <<<"${s##*) }"
		total=$((total + f[11] + f[12]))
	done
	echo "$total"
}

# settle: the pause between two runs. SETTLE seconds, then until the daemons
# of both clusters are idle (below IDLE_CORES over one second), at most
# SETTLE_MAX seconds more: Ceph's OSDs go on compacting and flushing
# deferred writes for a while after a run of small writes, and that work
# must not be charged to the other system's next run.
settle() {
	sleep "$SETTLE"
	local pids=() waited=0 t0 t1 limit
	[[ -n $CEPH_MON_PID ]] && pids+=("$CEPH_MON_PID")
	[[ -n $CEPH_MGR_PID ]] && pids+=("$CEPH_MGR_PID")
	pids+=("${CEPH_OSD_PIDS[@]}" "${CAIRN_OSD_PIDS[@]}")
	((${#pids[@]})) || return 0
	limit=$(python3 -c "print(int($IDLE_CORES * $CLK_TCK))")
	while ((waited < SETTLE_MAX)); do
		t0=$(cpu_ticks "${pids[@]}")
		sleep 1
		t1=$(cpu_ticks "${pids[@]}")
		[[ -n $t0 && -n $t1 ]] || return 0
		if ((t1 - t0 <= limit)); then
			((waited == 0)) || log "daemons idle after $waited s more"
			return 0
		fi
		waited=$((waited + 1))
	done
	log "daemons still busy (over $IDLE_CORES cores) after $SETTLE_MAX s more: going on"
}

# watch_bench NAME: wait for BENCH_PID; stop it if the disk gets too full.
# Returns the bench's exit status (or 99 when it was stopped for space).
watch_bench() {
	local floor=$((MIN_FREE_GIB * 1073741824)) rc=0 stopped=0
	while alive "$BENCH_PID"; do
		if (($(free_bytes) < floor)); then
			log "$1: free disk space fell below $MIN_FREE_GIB GiB: stopping the run"
			kill -TERM "$BENCH_PID" 2>/dev/null
			stopped=1
			break
		fi
		sleep 0.5
	done
	wait "$BENCH_PID" || rc=$?
	BENCH_PID=""
	((stopped)) && return 99
	return "$rc"
}

maybe_drop_caches() {
	if [[ $DROP_CACHES == 1 ]]; then
		sync
		echo 3 >/proc/sys/vm/drop_caches
	fi
}

# Generous limit: a full OSD makes clients wait forever.
BENCH_TIMEOUT=$((DURATION * 3 + 120))
CLEANUP_TIMEOUT=${CLEANUP_TIMEOUT:-$((DURATION * 4 + 60))}

# TIMED runs a bench client (bash -c "$TIMED" _ CMD ARGS...) and writes
# its CPU time to fd 3 (the second line of `times`): the client's share
# of the work counts too, and a client may do some of what the other
# system's OSDs do (cairn's codes its erasure-coded puts itself).
TIMED='"$@"; rc=$?; times >&3; exit $rc'

# run_ceph WORKLOAD MODE SIZE THREADS RUNNAME
run_ceph() {
	local wl=$1 mode=$2 size=$3 threads=$4 run=$5 out="$RESULTS/ceph-$1.txt" t0 t1 rc=0
	if ! ((RUN_CEPH)); then
		helper record-status "$RAW" ceph "$wl" skipped "ONLY=$ONLY"
		return 0
	fi
	local args=(-c "$CEPH_CONF" -p "$CEPH_POOL" bench "$DURATION" "$mode" -t "$threads" --run-name "$run")
	[[ $mode == write ]] && args+=(-b "$size" --no-cleanup)
	[[ $mode != write ]] && maybe_drop_caches
	log "Ceph  $wl: rados ${args[*]:2}"
	t0=$(cpu_ticks "${CEPH_OSD_PIDS[@]}")
	timeout "$BENCH_TIMEOUT" bash -c "$TIMED" _ rados "${args[@]}" >"$out" 2>&1 3>"$out.times" &
	BENCH_PID=$!
	watch_bench "Ceph $wl" || rc=$?
	t1=$(cpu_ticks "${CEPH_OSD_PIDS[@]}")
	local d=""
	[[ -n $t0 && -n $t1 ]] && d=$((t1 - t0))
	if ((rc == 99)); then
		helper record-status "$RAW" ceph "$wl" "stopped" "Ceph $wl stopped: free disk space below $MIN_FREE_GIB GiB"
	else
		((rc == 0)) || {
			log "Ceph $wl: rados bench exited with status $rc; last lines of $out:"
			tail -n 10 "$out" >&2
		}
		helper record-ceph "$RAW" "$wl" "$out" "$d" "$CLK_TCK" "$rc" "$out.times"
	fi
	helper summary "$RAW" >&2
	settle
}

# run_cairn WORKLOAD MODE SIZE THREADS RUNNAME
run_cairn() {
	local wl=$1 mode=$2 size=$3 threads=$4 run=$5 out="$RESULTS/cairn-$1.json" t0 t1 rc=0
	if ! ((RUN_CAIRN)); then
		helper record-status "$RAW" cairn "$wl" skipped "ONLY=$ONLY"
		return 0
	fi
	local args=(--conf "$CAIRN_CONF" bench "$CAIRN_POOL" "$mode" -t "$threads" -d "${DURATION}s" --run-name "$run" --json)
	[[ $mode == write ]] && args+=(-b "$size" --no-cleanup)
	[[ $mode != write ]] && maybe_drop_caches
	log "cairn $wl: cairn ${args[*]:2}"
	t0=$(cpu_ticks "${CAIRN_OSD_PIDS[@]}")
	timeout "$BENCH_TIMEOUT" bash -c "$TIMED" _ "$CAIRN" "${args[@]}" >"$out" 2>"$RESULTS/cairn-$wl.err" 3>"$out.times" &
	BENCH_PID=$!
	watch_bench "cairn $wl" || rc=$?
	t1=$(cpu_ticks "${CAIRN_OSD_PIDS[@]}")
	local d=""
	[[ -n $t0 && -n $t1 ]] && d=$((t1 - t0))
	if ((rc == 99)); then
		helper record-status "$RAW" cairn "$wl" "stopped" "cairn $wl stopped: free disk space below $MIN_FREE_GIB GiB"
	else
		((rc == 0)) || {
			log "cairn $wl: cairn bench exited with status $rc; last lines of $RESULTS/cairn-$wl.err:"
			tail -n 10 "$RESULTS/cairn-$wl.err" >&2
		}
		helper record-cairn "$RAW" "$wl" "$out" "$d" "$CLK_TCK" "$rc" "$out.times" >&2
	fi
	helper summary "$RAW" >&2
	settle
}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# cleanup_objects NAME RUNNAME [last]: delete a run's objects on both sides,
# timing it (deletes/s is a figure of its own). The last cleanup is skipped
# when the clusters are thrown away next anyway.
cleanup_objects() {
	local wl=$1 run=$2 t0 rc out
	if [[ ${3:-} == last && $KEEP != 1 ]]; then
		log "skipping the cleanup of $run: both clusters are deleted next"
		return 0
	fi
	if ((RUN_CEPH)); then
		log "Ceph  $wl: rados cleanup --run-name $run -t $THREADS"
		out="$RESULTS/ceph-$wl.txt"
		t0=$(now)
		rc=0
		timeout "$CLEANUP_TIMEOUT" rados -c "$CEPH_CONF" -p "$CEPH_POOL" cleanup --run-name "$run" -t "$THREADS" \
			>"$out" 2>&1 || rc=$?
		helper record-cleanup "$RAW" ceph "$wl" "$out" "$(since "$t0")" "$rc" >&2
	fi
	if ((RUN_CAIRN)); then
		log "cairn $wl: cairn bench $CAIRN_POOL cleanup --run-name $run -t $THREADS"
		out="$RESULTS/cairn-$wl.txt"
		t0=$(now)
		rc=0
		timeout "$CLEANUP_TIMEOUT" "$CAIRN" --conf "$CAIRN_CONF" bench "$CAIRN_POOL" cleanup --run-name "$run" -t "$THREADS" \
			>"$out" 2>&1 || rc=$?
		helper record-cleanup "$RAW" cairn "$wl" "$out" "$(since "$t0")" "$rc" >&2
	fi
	settle
}

# workload WORKLOAD MODE SIZE THREADS RUNNAME: Ceph first, then cairn.
workload() {
	run_ceph "$@"
	run_cairn "$@"
}

# --- block volumes: fio rbd vs fio nbd ------------------------------------------

FIO_JOBS=(
	"fio-randwrite-4k-qd1 randwrite 4k 1"
	"fio-randwrite-4k-qd16 randwrite 4k 16"
	"fio-randread-4k-qd16 randread 4k 16"
	"fio-write-1m-qd4 write 1m 4"
	"fio-read-1m-qd4 read 1m 4"
)
NBDKIT_PID=""
declare -A FIO_READY=() # fio_target of each image made and prefilled

# The systems fio runs on: ceph (an RBD image in the replicated pool), cairn
# (a volume in the 3-copy pool), nbdkit (memory); and for the ecblock suite
# ceph-ec (an RBD image whose data pool is the erasure-coded one), cairn-ec
# (a volume in the erasure-coded pool) and cairn-3copy (cairn's volume again,
# recorded apart so the ecblock table has its own run of it).

# fio_image SYSTEM: POOL/NAME of SYSTEM's image (an RBD image's pool is
# where its header lives; ceph-ec's data go to EC_POOL).
fio_image() {
	case $1 in
	ceph) echo "$CEPH_POOL/fioimg" ;;
	ceph-ec) echo "$CEPH_POOL/fioimg-ec" ;;
	cairn | cairn-3copy) echo "$CAIRN_POOL/fioimg" ;;
	cairn-ec) echo "$EC_POOL/fioimg" ;;
	esac
}

# fio_target SYSTEM: the fio options that reach SYSTEM's image.
fio_target() {
	local image
	image=$(fio_image "$1")
	case $1 in
	ceph | ceph-ec) echo "--ioengine=rbd --clientname=admin --pool=${image%%/*} --rbdname=${image#*/}" ;;
	cairn | cairn-3copy | cairn-ec) echo "--ioengine=nbd --uri=nbd://127.0.0.1:$CAIRN_NBD_PORT/$image" ;;
	nbdkit) echo "--ioengine=nbd --uri=nbd://127.0.0.1:$NBDKIT_PORT/" ;;
	esac
}

# fio_pids SYSTEM: the server processes whose CPU a job is charged.
fio_pids() {
	case $1 in
	ceph | ceph-ec) echo "${CEPH_OSD_PIDS[*]}" ;;
	cairn | cairn-3copy | cairn-ec) echo "${CAIRN_OSD_PIDS[*]}" ;;
	nbdkit) echo "$NBDKIT_PID" ;;
	esac
}

# fio_prepare SYSTEM...: make each system's image, FIO_IMAGE_MIB large, unless
# an earlier suite did, and prefill it with 1 MiB writes so reads read data.
# nbdkit must be running already.
fio_prepare() {
	local sys target image
	for sys in "$@"; do
		target=$(fio_target "$sys")
		image=$(fio_image "$sys")
		[[ -z ${FIO_READY[$target]:-} ]] || continue
		case $sys in
		ceph)
			log "Ceph: RBD image $image, ${FIO_IMAGE_MIB} MiB"
			ceph_cli osd pool application enable "$CEPH_POOL" rbd --yes-i-really-mean-it >/dev/null 2>&1 || true
			timeout 60 rbd -c "$CEPH_CONF" create "$image" --size "$FIO_IMAGE_MIB" || die "rbd create $image failed"
			;;
		ceph-ec)
			# RBD writes into parts of objects: an erasure-coded data pool
			# needs allow_ec_overwrites. The image's header and omap stay in
			# the replicated pool.
			log "Ceph: RBD image $image, ${FIO_IMAGE_MIB} MiB, its data in $EC_POOL ($EC_PROFILE, allow_ec_overwrites)"
			ceph_cli osd pool application enable "$CEPH_POOL" rbd --yes-i-really-mean-it >/dev/null 2>&1 || true
			ceph_cli osd pool application enable "$EC_POOL" rbd --yes-i-really-mean-it >/dev/null 2>&1 || true
			ceph_cli osd pool set "$EC_POOL" allow_ec_overwrites true >>"$CEPH_DIR/log/setup.out" 2>&1 ||
				ceph_die "ceph osd pool set $EC_POOL allow_ec_overwrites true failed: $(tail -n 3 "$CEPH_DIR/log/setup.out")"
			timeout 60 rbd -c "$CEPH_CONF" create "$image" --size "$FIO_IMAGE_MIB" --data-pool "$EC_POOL" ||
				die "rbd create $image --data-pool $EC_POOL failed"
			;;
		cairn | cairn-3copy | cairn-ec)
			log "cairn: volume $image, ${FIO_IMAGE_MIB} MiB, served by cairn nbd on $CAIRN_NBD_PORT"
			CAIRN_EXPERIMENTAL_EC=1 "$CAIRN" --conf "$CAIRN_CONF" volume create "$image" --size "${FIO_IMAGE_MIB}M" >/dev/null ||
				die "cairn volume create $image failed"
			;;
		esac
		log "$sys: prefilling the image (1 MiB writes) so reads read data"
		# shellcheck disable=SC2086
		CEPH_CONF="$CEPH_CONF" timeout "$BENCH_TIMEOUT" fio --name=fill $target --rw=write --bs=1m \
			--iodepth=4 --size="${FIO_IMAGE_MIB}M" >"$RESULTS/$sys-fill.txt" 2>&1 || die "prefilling $sys failed: $(tail -n 5 "$RESULTS/$sys-fill.txt")"
		FIO_READY[$target]=1
	done
}

# run_fio SYSTEM NAME RW BS QD
run_fio() {
	local sys=$1 name=$2 rw=$3 bs=$4 qd=$5 out="$RESULTS/$1-$2.json" t0 t1 rc=0 pids
	read -ra pids <<<"$(fio_pids "$sys")"
	log "$sys $name: fio --rw=$rw --bs=$bs --iodepth=$qd"
	t0=$(cpu_ticks "${pids[@]}")
	# shellcheck disable=SC2046
	CEPH_CONF="$CEPH_CONF" timeout "$BENCH_TIMEOUT" fio --name="$name" $(fio_target "$sys") --rw="$rw" --bs="$bs" \
		--iodepth="$qd" --size="${FIO_IMAGE_MIB}M" --time_based --runtime="$DURATION" --ramp_time=2 \
		--output-format=json >"$out" 2>&1 &
	BENCH_PID=$!
	watch_bench "$sys $name" || rc=$?
	t1=$(cpu_ticks "${pids[@]}")
	local d=""
	[[ -n $t0 && -n $t1 ]] && d=$((t1 - t0))
	((rc == 0)) || {
		log "$sys $name: fio exited with status $rc; last lines of $out:"
		tail -n 10 "$out" >&2
	}
	helper record-fio "$RAW" "$sys" "$name" "$out" "$d" "$CLK_TCK" "$rc"
	helper summary "$RAW" >&2
	settle
}

fio_check() {
	command -v fio >/dev/null || die "fio is not installed (apt-get install fio)"
	fio --enghelp 2>/dev/null | grep -qw rbd || die "this fio has no rbd engine (Debian's fio has it)"
}

block_suite() {
	fio_check
	local systems=()
	((RUN_CEPH)) && systems+=(ceph)
	((RUN_CAIRN)) && systems+=(cairn)
	if command -v nbdkit >/dev/null && port_free "$NBDKIT_PORT"; then
		nbdkit --foreground --port "$NBDKIT_PORT" --ipaddr 127.0.0.1 memory "${FIO_IMAGE_MIB}M" &
		NBDKIT_PID=$!
		sleep 1
		systems+=(nbdkit)
	else
		log "nbdkit is not installed (or port $NBDKIT_PORT is busy): no NBD-protocol baseline column"
	fi
	fio_prepare "${systems[@]}"
	local sys job name rw bs qd
	for job in "${FIO_JOBS[@]}"; do
		read -r name rw bs qd <<<"$job"
		for sys in "${systems[@]}"; do
			run_fio "$sys" "$name" "$rw" "$bs" "$qd"
		done
	done
	[[ -n $NBDKIT_PID ]] && stop_pids 5 "$NBDKIT_PID"
	NBDKIT_PID=""
}

# ecblock_suite: the block suite's 4 KiB jobs on an RBD image whose data are
# in Ceph's erasure-coded pool and on a volume in cairn's, each job on one
# and then the other; the 4 KiB random writes at depth 16 also on cairn's
# 3-copy volume right after, for what the erasure code costs cairn.
ecblock_suite() {
	fio_check
	local systems=()
	((RUN_CEPH)) && systems+=(ceph-ec)
	((RUN_CAIRN)) && systems+=(cairn-ec)
	fio_prepare "${systems[@]}"
	((RUN_CAIRN)) && fio_prepare cairn-3copy
	local sys job name rw bs qd
	for job in "${FIO_JOBS[@]}"; do
		read -r name rw bs qd <<<"$job"
		[[ $bs == 4k ]] || continue
		for sys in "${systems[@]}"; do
			run_fio "$sys" "$name" "$rw" "$bs" "$qd"
		done
		if ((RUN_CAIRN)) && [[ $name == fio-randwrite-4k-qd16 ]]; then
			run_fio cairn-3copy "$name" "$rw" "$bs" "$qd"
		fi
	done
}

# ec_suite: the object workloads on the erasure-coded pools (the caller
# sets CEPH_POOL and CAIRN_POOL to them).
ec_suite() {
	workload ec-write-4m write 4194304 "$THREADS" "e4m-$STAMP"
	workload ec-seq-4m seq 4194304 "$THREADS" "e4m-$STAMP"
	workload ec-rand-4m rand 4194304 "$THREADS" "e4m-$STAMP"
	cleanup_objects cleanup-ec-4m "e4m-$STAMP"
	workload ec-write-4k write 4096 "$THREADS" "e4k-$STAMP"
	workload ec-rand-4k rand 4096 "$THREADS" "e4k-$STAMP"
	if suite block || suite ecblock; then
		cleanup_objects cleanup-ec-4k "e4k-$STAMP"
	else
		cleanup_objects cleanup-ec-4k "e4k-$STAMP" last
	fi
}

# --- main ----------------------------------------------------------------------

CEPH_VERSION="n/a"
CEPH_ROTATIONAL="n/a"
if ((RUN_CEPH)); then
	start_ceph
	CEPH_VERSION=$(ceph-osd --version | awk '{print $3}')
	CEPH_ROTATIONAL=$(ceph_cli osd metadata 0 -f json 2>/dev/null |
		python3 -c 'import json,sys; m=json.load(sys.stdin); print(m.get("bluestore_bdev_rotational", m.get("rotational", "n/a")))' || echo n/a)
	log "Ceph: osd.0 reports rotational=$CEPH_ROTATIONAL (1 = HDD profile)"
fi
if ((RUN_CAIRN)); then
	start_cairn
fi

# What the idle clusters cost: both are up during every run of the other.
# First wait until both are idle: cairn's OSDs reserve their read caches'
# memory right after they start, which must neither overlap the first run
# nor count as the steady idle cost.
IDLE_SECS=5
sleep 2
settle
ci0=$( ((RUN_CEPH)) && cpu_ticks "${CEPH_OSD_PIDS[@]}" || echo "")
ki0=$( ((RUN_CAIRN)) && cpu_ticks "${CAIRN_OSD_PIDS[@]}" || echo "")
sleep "$IDLE_SECS"
ci1=$( ((RUN_CEPH)) && cpu_ticks "${CEPH_OSD_PIDS[@]}" || echo "")
ki1=$( ((RUN_CAIRN)) && cpu_ticks "${CAIRN_OSD_PIDS[@]}" || echo "")
idle_rate() { [[ -n $1 && -n $2 ]] && awk -v d="$(($2 - $1))" -v t="$CLK_TCK" -v s="$IDLE_SECS" 'BEGIN { printf "%.3f", d / t / s }' || echo None; }
CEPH_IDLE=$(idle_rate "$ci0" "$ci1")
CAIRN_IDLE=$(idle_rate "$ki0" "$ki1")
log "idle OSD CPU (cores): Ceph ${CEPH_IDLE/None/n\/a}, cairn ${CAIRN_IDLE/None/n\/a}"

python3 - "$RESULTS/meta.json" <<EOF
import json, os, sys
json.dump(dict(date="$(date -u +%Y-%m-%dT%H:%M:%SZ)", duration=$DURATION, threads=$THREADS,
               nproc=$(nproc), host="$(hostname)", kernel="$(uname -r)",
               ceph_version="$CEPH_VERSION", ceph_rotational="$CEPH_ROTATIONAL", ceph_pg_num=$CEPH_PG_NUM,
               ceph_block_gib=$CEPH_BLOCK_GIB, cairn_version="$CAIRN_VERSION", only="$ONLY", ec_profile="$EC_PROFILE",
               cairn_transport="$([[ ${CAIRN_LOCAL_SOCKETS:-1} == 0 ]] && echo "loopback TCP" || echo "local sockets")",
               settle_s=$SETTLE, settle_max_s=$SETTLE_MAX, idle_cores=$IDLE_CORES, drop_caches=$DROP_CACHES,
               ceph_idle_osd_cores=$CEPH_IDLE, cairn_idle_osd_cores=$CAIRN_IDLE,
               baseline=json.load(open("$BASELINE")) if os.path.exists("$BASELINE") else None),
          open(sys.argv[1], "w"), indent=2)
EOF

STAMP=$$
if suite objects; then
	log "object workloads: $DURATION s each, Ceph then cairn"
	workload write-4m write 4194304 "$THREADS" "b4m-$STAMP"
	workload seq-4m seq 4194304 "$THREADS" "b4m-$STAMP"
	workload rand-4m rand 4194304 "$THREADS" "b4m-$STAMP"
	cleanup_objects cleanup-4m "b4m-$STAMP"
	workload write-4k write 4096 "$THREADS" "b4k-$STAMP"
	workload seq-4k seq 4096 "$THREADS" "b4k-$STAMP"
	workload rand-4k rand 4096 "$THREADS" "b4k-$STAMP"
	cleanup_objects cleanup-4k "b4k-$STAMP"
	workload write-4k-qd1 write 4096 1 "b4kq1-$STAMP"
	# The other suites need the space back; otherwise the clusters go next.
	if suite block || suite ec || suite ecblock; then
		cleanup_objects cleanup-4k-qd1 "b4kq1-$STAMP"
	else
		cleanup_objects cleanup-4k-qd1 "b4kq1-$STAMP" last
	fi
fi
if suite ec; then
	log "erasure-coded object workloads ($EC_PROFILE): $DURATION s each, Ceph then cairn"
	CEPH_POOL=$EC_POOL CAIRN_POOL=$EC_POOL ec_suite
fi
if suite block; then
	block_suite
fi
if suite ecblock; then
	log "block volumes on the erasure-coded pools ($EC_PROFILE): $DURATION s per job, Ceph then cairn"
	ecblock_suite
fi

echo
helper report "$RAW" "$WORKDIR/results.md" "$WORKDIR/results.json" "$RESULTS/meta.json"
echo
log "wrote $WORKDIR/results.md and $WORKDIR/results.json (raw outputs in $RESULTS)"
# Last, where a glance finds it.
helper ec-volume-ratio "$RAW"
