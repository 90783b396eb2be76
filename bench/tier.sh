#!/usr/bin/env bash
# tier.sh: small random writes on slow disks, the case a fast tier exists
# for (issue 30). Each of 3 OSDs gets its own "HDD": a loop device with ext4
# on a sparse file, capped by the cgroup v1 block throttle at HDD_IOPS
# reads and writes a second and HDD_MBPS MB/s, while the plain disk plays the
# flash. fio's nbd engine then writes 4 KiB at random into a volume, at
# QD16 and QD1, uniform and zipf:1.2, on each layout:
#
#   hdd-only     data and metadata (index, commit log, journal) on the HDDs
#   meta-flash   data on the HDDs, --meta-dir on flash (today's cairn)
#   writeback    meta-flash plus a write-back area of WRITEBACK on the flash
#                (--writeback-size): small writes stay there until destaged
#   flash-cache  writeback plus a read cache of FLASH_CACHE on the flash
#                (--flash-cache-size): blocks of small reads that went to an
#                HDD are read from flash the next time
#   ceph-db-on-flash  Ceph 16.2 BlueStore (1 mon, 1 mgr, 3 OSDs, a pool of
#                3 copies, one per OSD), each OSD's data block a file on its
#                HDD, its DB (RocksDB, with the WAL) a file of CEPH_DB_SIZE on
#                the flash, as ceph-volume --block.db deploys it; fio's rbd
#                engine into an RBD image of VOLUME
#
# One table at the end (with the writes and reads a second the HDDs took), and
# the lines "meta-flash/hdd-only 4K randwrite QD16 ratio: X.XX",
# "write-back/ceph-db-on-flash ...", "flash-cache/writeback 4K randread hot
# QD16 ratio: X.XX" and, last, "write-back/hdd-only ...".
# Everything it makes (loop devices, mounts, throttle rules, processes, files)
# is removed on exit, also on an error or Ctrl-C.
#
#   sudo bench/tier.sh                  # about two hours (the 10-minute runs)
#   LONG=0 sudo -E bench/tier.sh        # about an hour (the read jobs fill the volume first)
#   DURATION=30 VOLUME=1G LONG=0 sudo -E bench/tier.sh
#
# Environment:
#   DURATION=60          seconds per fio job
#   LONG=1               also run QD16 uniform for 10 minutes on each layout
#                        (the steady state; 0: skip)
#   VOLUME=2G            volume size (the random writes' working set)
#   HDD_IOPS=200 HDD_MBPS=150   the "HDD"'s limits (each direction)
#   HDD_SIZE=8G          sparse file behind each loop device
#   LAYOUTS="hdd-only meta-flash writeback flash-cache ceph-db-on-flash"   which layouts to run
#   WRITEBACK=4G         each OSD's write-back area (layout writeback)
#   CEPH_DB_SIZE=2G      each Ceph OSD's DB file on the flash (ceph-db-on-flash)
#   CEPH_BLOCK_SIZE=4G   each Ceph OSD's data block file on its HDD
#   CEPH_PG_NUM=128      PGs of the Ceph pool
#   FLASH_CACHE=1G       each OSD's read cache on flash (layout flash-cache)
#   JOBS="qd16-uniform qd1-uniform qd16-zipf qd16-randread-cold qd16-randread-hot"
#                        which jobs of DURATION to run. qd16-randread-cold:
#                        4 KiB random reads with the page cache dropped, as of
#                        data evicted from memory. qd16-randread-hot: a hot
#                        set larger than memory: the volume read once in
#                        64 KiB reads, then 4 KiB random reads over it, with
#                        the cluster's processes capped (memory cgroup) at
#                        READ_MEMORY of new memory, page cache included (not
#                        run on Ceph: its cache is its own memory)
#   READ_MEMORY=512M     the cap of qd16-randread-hot
#   WORKDIR=/tmp/cairn-tier         (the daemons' logs stay in WORKDIR-logs)
#   CAIRN_ETCD_PORT=24890 CAIRN_OSD_PORT=27890 CAIRN_NBD_PORT=20909
#   CEPH_MON_V2_PORT=23300 CEPH_MON_V1_PORT=23789 CEPH_OSD_PORT_MIN=28000
# Needs root (loop devices, mount, cgroup), fio, losetup, mkfs.ext4, python3, go,
# and for ceph-db-on-flash Ceph 16.2 (apt-get install ceph) and fio's rbd engine.
set -euo pipefail

DURATION=${DURATION:-60}
LONG=${LONG:-1}
VOLUME=${VOLUME:-2G}
HDD_IOPS=${HDD_IOPS:-200}
HDD_MBPS=${HDD_MBPS:-150}
HDD_SIZE=${HDD_SIZE:-8G}
WORKDIR=${WORKDIR:-/tmp/cairn-tier}
LAYOUTS=${LAYOUTS:-hdd-only meta-flash writeback flash-cache ceph-db-on-flash}
WRITEBACK=${WRITEBACK:-4G}
FLASH_CACHE=${FLASH_CACHE:-1G}
READ_MEMORY=${READ_MEMORY:-512M}
CEPH_DB_SIZE=${CEPH_DB_SIZE:-2G}
CEPH_BLOCK_SIZE=${CEPH_BLOCK_SIZE:-4G}
CEPH_PG_NUM=${CEPH_PG_NUM:-128}
CEPH_MON_V2_PORT=${CEPH_MON_V2_PORT:-23300}
CEPH_MON_V1_PORT=${CEPH_MON_V1_PORT:-23789}
CEPH_OSD_PORT_MIN=${CEPH_OSD_PORT_MIN:-28000}
JOBS=${JOBS:-qd16-uniform qd1-uniform qd16-zipf qd16-randread-cold qd16-randread-hot}
CAIRN_ETCD_PORT=${CAIRN_ETCD_PORT:-24890}
CAIRN_OSD_PORT=${CAIRN_OSD_PORT:-27890}
CAIRN_NBD_PORT=${CAIRN_NBD_PORT:-20909}
OSDS=3
NOSDS=$OSDS # lib.sh's Ceph
CEPH_POOL=tier
THROTTLE=/sys/fs/cgroup/blkio
MEMCG=/sys/fs/cgroup/memory/cairn-tier
REPO=$(cd "$(dirname "$0")/.." && pwd)

BENCH=tier
. "$REPO/bench/lib.sh"
[[ $DURATION =~ ^[1-9][0-9]*$ ]] || die "DURATION must be a whole number of seconds, got '$DURATION'"
[[ $(id -u) == 0 ]] || die "needs root: loop devices, mounts and the block throttle"
[[ -w $THROTTLE/blkio.throttle.write_iops_device ]] || die "no cgroup v1 block throttle at $THROTTLE"
for t in fio losetup mkfs.ext4 python3 go; do
	command -v $t >/dev/null || die "$t is not installed (apt-get install fio util-linux e2fsprogs)"
done
for layout in $LAYOUTS; do
	case $layout in
	hdd-only | meta-flash | writeback | flash-cache) ;;
	ceph-db-on-flash)
		for t in ceph ceph-mon ceph-mgr ceph-osd ceph-authtool monmaptool rbd; do
			command -v $t >/dev/null || die "$t is not installed (apt-get install ceph)"
		done
		fio --enghelp 2>/dev/null | grep -qw rbd || die "this fio has no rbd engine (Debian's fio has it)"
		;;
	*) die "unknown layout '$layout' in LAYOUTS" ;;
	esac
done

loops=()
cluster=""
cleanup() {
	set +e
	uncap_memory
	stop_cluster
	stop_ceph
	rm -rf "$WORKDIR-logs" && mkdir -p "$WORKDIR-logs"
	for l in "$WORKDIR"/*/dev/*.log "$WORKDIR"/*.json; do
		[[ -e $l ]] && cp "$l" "$WORKDIR-logs/$(basename "$(dirname "$(dirname "$l")")")-$(basename "$l")"
	done
	cp -r "$WORKDIR/ceph-logs" "$WORKDIR-logs/ceph" 2>/dev/null
	for dev in "${loops[@]}"; do
		unthrottle "$dev"
		umount "$WORKDIR/hdd-$(basename "$dev")" 2>/dev/null
		losetup -d "$dev"
	done
	rm -rf "$WORKDIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# throttle caps a block device at the HDD's IOPS and bandwidth, both ways.
throttle() {
	local mm
	mm=$(lsblk -dno MAJ:MIN "$1" | tr -d ' ')
	for f in read_iops write_iops; do echo "$mm $HDD_IOPS" >"$THROTTLE/blkio.throttle.${f}_device"; done
	for f in read_bps write_bps; do echo "$mm $((HDD_MBPS * 1000000))" >"$THROTTLE/blkio.throttle.${f}_device"; done
}

unthrottle() {
	local mm
	mm=$(lsblk -dno MAJ:MIN "$1" 2>/dev/null | tr -d ' ') || return 0
	for f in read_iops write_iops read_bps write_bps; do echo "$mm 0" >"$THROTTLE/blkio.throttle.${f}_device" 2>/dev/null; done
}

# cap_memory: the cluster's processes into a memory cgroup that lets them
# take READ_MEMORY more (what they hold already stays outside it): their
# page cache then holds that much of what they read.
cap_memory() {
	mkdir -p "$MEMCG"
	numfmt --from=iec "$READ_MEMORY" >"$MEMCG/memory.limit_in_bytes"
	local p
	for p in $(pgrep -f "^$CAIRN "); do echo "$p" >"$MEMCG/cgroup.procs" 2>/dev/null || true; done
}

uncap_memory() {
	[[ -d $MEMCG ]] || return 0
	local p
	for p in $(cat "$MEMCG/cgroup.procs"); do echo "$p" >"${MEMCG%/*}/cgroup.procs" 2>/dev/null; done
	rmdir "$MEMCG" 2>/dev/null || true
}

# make_hdds makes OSDS throttled loop devices with ext4, mounted under WORKDIR.
make_hdds() {
	for i in $(seq 0 $((OSDS - 1))); do
		truncate -s "$HDD_SIZE" "$WORKDIR/hdd$i.img"
		local dev
		dev=$(losetup -f --show "$WORKDIR/hdd$i.img")
		loops+=("$dev")
		mkfs.ext4 -q -F "$dev"
		mkdir -p "$WORKDIR/hdd-$(basename "$dev")"
		mount "$dev" "$WORKDIR/hdd-$(basename "$dev")"
		throttle "$dev"
	done
}

# start_cluster LAYOUT: a dev cluster whose osd.N keeps its data on HDD N,
# and its metadata there too (hdd-only) or on flash (meta-flash, and
# writeback with its write-back area there); a volume.
start_cluster() {
	local layout=$1 dir=$WORKDIR/$1 wb=()
	mkdir -p "$dir/dev" "$dir/flash"
	[[ $layout == writeback || $layout == flash-cache ]] && wb=(--writeback-size "$WRITEBACK")
	[[ $layout == flash-cache ]] && wb+=(--flash-cache-size "$FLASH_CACHE")
	for i in $(seq 0 $((OSDS - 1))); do
		local hdd
		hdd=$WORKDIR/hdd-$(basename "${loops[$i]}")/$layout-osd.$i
		mkdir -p "$hdd"
		ln -s "$hdd" "$dir/dev/osd.$i"
		if [[ $layout != hdd-only ]]; then
			mkdir -p "$dir/flash/osd.$i-meta"
			ln -s "$dir/flash/osd.$i-meta" "$hdd/meta"
		fi
	done
	"$CAIRN" dev --dir "$dir/dev" --hosts $OSDS --osds-per-host 1 --etcd-port "$CAIRN_ETCD_PORT" \
		--osd-port "$CAIRN_OSD_PORT" --nbd-port "$CAIRN_NBD_PORT" --s3-port 0 --metrics-port 0 \
		--dashboard-port 0 "${wb[@]}" >"$dir/dev.log" 2>&1 &
	cluster=$!
	for _ in $(seq 240); do grep -q "is up" "$dir/dev.log" && break; sleep 0.5; done
	grep -q "is up" "$dir/dev.log" || die "cairn dev did not come up: $(tail "$dir/dev.log")"
	"$CAIRN" --conf "$dir/dev/cairn.conf" volume create default/tier --size "$VOLUME" >/dev/null
}

stop_cluster() {
	[[ -n $cluster ]] || return 0
	kill "$cluster" 2>/dev/null
	wait "$cluster" 2>/dev/null
	cluster=""
}

# start_ceph: Ceph with each OSD's data block on its HDD and its DB (and
# WAL) on flash, the way ceph-volume lays out an OSD given --block.db on an
# SSD; Ceph's defaults otherwise, and its HDD or SSD profile from what it
# detects. A pool of 3 copies (one per OSD) and an RBD image of VOLUME.
start_ceph() {
	local dir=$WORKDIR/ceph-db-on-flash i
	mkdir -p "$dir"
	for i in $(seq 0 $((OSDS - 1))); do
		local hdd
		hdd=$WORKDIR/hdd-$(basename "${loops[$i]}")/ceph-db-on-flash-osd.$i
		mkdir -p "$hdd"
		ln -s "$hdd" "$dir/hdd.$i"
	done
	CEPH_DIR=$dir/ceph
	mkdir -p "$CEPH_DIR"
	# Files stand in for the devices, hence the create and size settings.
	CEPH_EXTRA_CONF="# The data block on the OSD's HDD, the DB (its WAL with it) on flash.
bluestore block path = $dir/hdd.\$id/block
bluestore block create = true
bluestore block size = $(numfmt --from=iec "$CEPH_BLOCK_SIZE")
bluestore block db path = $dir/osd.\$id-db
bluestore block db create = true
bluestore block db size = $(numfmt --from=iec "$CEPH_DB_SIZE")"
	ceph_start
	ceph_pool_create "$CEPH_POOL" "$CEPH_PG_NUM" rbd
	log "Ceph: pool $CEPH_POOL (size 3, min_size 2, pg_num $CEPH_PG_NUM); waiting for its PGs to be active+clean"
	ceph_wait 180 "$CEPH_PG_NUM"
	ceph_healthy
	timeout 60 rbd -c "$CEPH_CONF" create "$CEPH_POOL/tier" --size "$VOLUME" || ceph_die "rbd create failed"
	ceph_report >"$WORKDIR/ceph.txt"
	cat "$WORKDIR/ceph.txt" >&2
}

# ceph_report: what Ceph detected (rotational or not, where its devices are)
# and the settings that decide how it writes 4 KiB, as osd.0 runs them.
ceph_report() {
	{
		ceph_cli osd metadata 0 -f json
		ceph --admin-daemon "$CEPH_DIR/run/ceph-osd.0.asok" config show -f json
	} | python3 -c '
import json, sys
dec = json.JSONDecoder()
text = sys.stdin.read().lstrip()
meta, end = dec.raw_decode(text)
conf, _ = dec.raw_decode(text[end:].lstrip())
print("Ceph %s, osd.0 as it detected its devices:" % meta.get("ceph_version_short", "?"))
for k in ["rotational", "journal_rotational", "bluestore_bdev_rotational",
          "bluefs_dedicated_db", "bluefs_db_rotational", "bluefs_db_size", "bluefs_dedicated_wal",
          "bluestore_bdev_size"]:
    print("  %s: %s" % (k, meta.get(k, "n/a")))
print("osd.0 settings that decide how 4 KiB writes go (Ceph defaults unless set above):")
for k in ["bluestore_prefer_deferred_size_hdd", "bluestore_prefer_deferred_size_ssd", "bluestore_min_alloc_size_hdd",
          "bluestore_min_alloc_size_ssd", "bluestore_deferred_batch_ops_hdd", "bluestore_throttle_deferred_bytes",
          "osd_op_num_shards_hdd", "osd_op_num_threads_per_shard_hdd", "osd_op_queue", "osd_memory_target",
          "bluestore_block_db_size"]:
    print("  %s: %s" % (k, conf.get(k, "n/a")))
' || echo "(osd.0's metadata or configuration could not be read)"
	echo "  rbd_cache (fio's librbd, client.admin): $(ceph-conf -c "$CEPH_CONF" -n client.admin --lookup rbd_cache)"
	local l
	for l in "${loops[@]}"; do
		echo "  $l (an HDD) /sys rotational: $(cat "/sys/block/$(basename "$l")/queue/rotational")"
	done
	echo "  the flash ($(df --output=source "$WORKDIR" | tail -n 1)) /sys rotational: $(
		d=$(lsblk -no PKNAME "$(df --output=source "$WORKDIR" | tail -n 1)" 2>/dev/null | head -n 1)
		[[ -z $d ]] && d=$(basename "$(df --output=source "$WORKDIR" | tail -n 1)")
		cat "/sys/block/$d/queue/rotational" 2>/dev/null || echo n/a
	)"
}

stop_ceph() {
	[[ -n $CEPH_DIR ]] || return 0
	ceph_stop
	mkdir -p "$WORKDIR/ceph-logs" && cp -f "$CEPH_DIR"/log/* "$WORKDIR/ceph-logs/" 2>/dev/null
	rm -rf "$CEPH_DIR" "$WORKDIR"/ceph-db-on-flash/hdd.*/block
	CEPH_DIR=""
}

# fio_target LAYOUT: the fio options that reach the layout's volume.
fio_target() {
	if [[ $1 == ceph-db-on-flash ]]; then
		echo "--ioengine=rbd --clientname=admin --pool=$CEPH_POOL --rbdname=tier"
	else
		echo "--ioengine=nbd --uri=nbd://127.0.0.1:$CAIRN_NBD_PORT/default/tier"
	fi
}

# hdd_ios: reads and writes completed so far, summed over the HDDs.
hdd_ios() {
	local l files=()
	for l in "${loops[@]}"; do files+=("/sys/block/$(basename "$l")/stat"); done
	awk '{ r += $1; w += $5 } END { print r, w }' "${files[@]}"
}

# after_job LAYOUT: what has not reached the HDDs as fio ends (cairn: each
# OSD's write-back area; Ceph: its DB's use of flash and of the HDD, where it
# spills over).
after_job() {
	if [[ $1 != ceph-db-on-flash ]]; then
		"$CAIRN" --conf "$WORKDIR/$1/dev/cairn.conf" osd df >&2 || true
		return 0
	fi
	local i
	for i in $(seq 0 $((OSDS - 1))); do
		ceph --admin-daemon "$CEPH_DIR/run/ceph-osd.$i.asok" perf dump bluefs 2>/dev/null | python3 -c '
import json, sys
b = {k: v / 2**20 for k, v in json.load(sys.stdin)["bluefs"].items() if k.endswith("_bytes")}
print("osd.%s: DB on flash %.0f of %.0f MiB used, spilled over to the HDD %.0f MiB, WAL %.0f MiB" % (
      sys.argv[1], b["db_used_bytes"], b["db_total_bytes"], b["slow_used_bytes"], b["wal_used_bytes"]))
' "$i" >&2 || true
	done
}

# sample_dirty LAYOUT FILE: every 5 s until killed, the bytes in the OSDs'
# write-back areas not yet on their HDDs, summed, one line each.
sample_dirty() {
	while sleep 5; do
		"$CAIRN" --conf "$WORKDIR/$1/dev/cairn.conf" --json osd df 2>/dev/null |
			python3 -c 'import json, sys; print(sum(r.get("writeback_dirty_bytes", 0) for r in json.load(sys.stdin)))' >>"$2" || true
	done
}

# prepare_reads LAYOUT JOB: the whole volume written (a thin volume's holes
# would read without any IO), then nothing of it in the page cache, as for
# data evicted from memory. For the hot job, the cluster's memory capped and
# the volume read once, as a hot set read before.
prepare_reads() {
	local layout=$1 name=$2 target
	read -ra target <<<"$(fio_target "$layout")"
	log "$layout: writing the whole volume in 1 MiB writes before the reads"
	CEPH_CONF=$CEPH_CONF timeout 300 fio --name=fill "${target[@]}" --rw=write --bs=1m --iodepth=4 --size="$VOLUME" >/dev/null ||
		log "$layout: writing the volume did not finish in 5 minutes; the reads find part of it unwritten"
	sync
	echo 3 >/proc/sys/vm/drop_caches
	[[ $name == *-hot ]] || return 0
	cap_memory
	log "$layout: memory capped at $READ_MEMORY more; reading the whole volume once in 64 KiB reads"
	CEPH_CONF=$CEPH_CONF timeout 300 fio --name=warm "${target[@]}" --rw=read --bs=64k --iodepth=16 --size="$VOLUME" >/dev/null ||
		log "$layout: reading the volume did not finish in 5 minutes"
}

# run_jobs LAYOUT: the fio jobs against the running cluster's volume.
run_jobs() {
	local layout=$1 target
	read -ra target <<<"$(fio_target "$layout")"
	local jobs=("qd16-uniform 16 random $DURATION randwrite" "qd1-uniform 1 random $DURATION randwrite" "qd16-zipf 16 zipf:1.2 $DURATION randwrite")
	[[ $LONG == 1 ]] && jobs+=("qd16-uniform-10min 16 random 600 randwrite")
	jobs+=("qd16-randread-cold 16 random $DURATION randread" "qd16-randread-hot 16 random $DURATION randread")
	for job in "${jobs[@]}"; do
		read -r name qd dist secs rw <<<"$job"
		[[ $name == *-10min || " $JOBS " == *" $name "* ]] || continue
		if [[ $name == *-hot && $layout == ceph-db-on-flash ]]; then
			log "$layout: no $name (Ceph's cache is its own memory, which the cap would not bound the same way)"
			continue
		fi
		log "$layout: 4 KiB $rw, $name, ${secs}s"
		[[ $rw == randread ]] && prepare_reads "$layout" "$name"
		local ios0 t0 sampler=""
		ios0=$(hdd_ios)
		t0=$(date +%s.%N)
		if [[ $layout != ceph-db-on-flash ]]; then
			sample_dirty "$layout" "$WORKDIR/$layout-$name.dirty" &
			sampler=$!
		fi
		CEPH_CONF=$CEPH_CONF fio --name="$name" "${target[@]}" --rw="$rw" --bs=4k --iodepth="$qd" \
			--random_distribution="$dist" --size="$VOLUME" --time_based --runtime="$secs" \
			--ramp_time=5 --output-format=json >"$WORKDIR/$layout-$name.json" ||
			log "$layout $name: fio reported an error: see its output and the daemons' logs in $WORKDIR-logs"
		if [[ -n $sampler ]]; then
			kill "$sampler" 2>/dev/null || true
			wait "$sampler" 2>/dev/null || true
		fi
		# The HDDs' reads and writes over fio's whole run (its ramp included).
		echo "$ios0 $(hdd_ios) $t0 $(date +%s.%N)" >"$WORKDIR/$layout-$name.hdd"
		uncap_memory
		after_job "$layout"
	done
}

rm -rf "$WORKDIR" && mkdir -p "$WORKDIR"
log "building cairn"
(cd "$REPO" && go build -o "$WORKDIR/cairn" ./cmd/cairn)
CAIRN=$WORKDIR/cairn
log "making $OSDS HDDs: loop devices with ext4, $HDD_IOPS IOPS and $HDD_MBPS MB/s each way"
make_hdds
for layout in $LAYOUTS; do
	log "layout $layout"
	if [[ $layout == ceph-db-on-flash ]]; then
		start_ceph
		run_jobs "$layout"
		stop_ceph
	else
		start_cluster "$layout"
		run_jobs "$layout"
		stop_cluster
	fi
done

[[ -e $WORKDIR/ceph.txt ]] && cat "$WORKDIR/ceph.txt" && echo
# shellcheck disable=SC2086 # LAYOUTS: one argument a layout
python3 - "$WORKDIR" "$LONG" "$JOBS" $LAYOUTS <<'EOF'
import json, sys
work, long, wanted, layouts = sys.argv[1], sys.argv[2] == "1", sys.argv[3].split(), sys.argv[4:]
def stats(layout, name):
    text = open(f"{work}/{layout}-{name}.json").read()
    j = json.loads(text[text.index("{"):])["jobs"][0]
    w = j["write"] if j["write"]["io_bytes"] else j["read"]
    lat = w["clat_ns"]["percentile"]
    return w["iops"], lat["50.000000"] / 1e6, lat["99.000000"] / 1e6, w["clat_ns"]["max"] / 1e6, j.get("error", 0)
def hdd_writes(layout, name):
    r0, w0, r1, w1, t0, t1 = map(float, open(f"{work}/{layout}-{name}.hdd").read().split())
    return (w1 - w0) / (t1 - t0), (r1 - r0) / (t1 - t0)
jobs = [n for n in ["qd16-uniform", "qd1-uniform", "qd16-zipf"] if n in wanted] + (["qd16-uniform-10min"] if long else [])
jobs += [n for n in ["qd16-randread-cold", "qd16-randread-hot"] if n in wanted]
print("| layout | job | IOPS | p50 ms | p99 ms | max ms | HDD writes/s | HDD reads/s | fio error |")
print("|---|---|---|---|---|---|---|---|---|")
for layout in layouts:
    for n in jobs:
        if n.endswith("-hot") and layout == "ceph-db-on-flash":
            continue
        i, p50, p99, mx, err = stats(layout, n)
        hw, hr = hdd_writes(layout, n)
        kind = "randread" if "randread" in n else "randwrite"
        print(f"| {layout} | 4K {kind} {n} | {i:.0f} | {p50:.2f} | {p99:.2f} | {mx:.0f} | {hw:.0f} | {hr:.0f} | {err or ''} |")
def dirty(layout, name):
    try:
        return [int(x) for x in open(f"{work}/{layout}-{name}.dirty").read().split()]
    except (OSError, ValueError):
        return []
charts = [(l, n, dirty(l, n)) for l in layouts for n in jobs if max(dirty(l, n), default=0) > 0]
if charts:
    print("\nDirty bytes in the write-back areas (all OSDs), every 5 s, each bar a share of the job's peak:")
    for l, n, d in charts:
        bars = "".join("▁▂▃▄▅▆▇█"[min(7, v * 8 // max(d))] for v in d)
        print(f"  {l} {n:<20} {bars}  peak {max(d) / 2**20:.0f} MiB, last {d[-1] / 2**20:.0f} MiB")
if "meta-flash" in layouts and "hdd-only" in layouts and "qd16-uniform" in jobs:
    r = stats("meta-flash", "qd16-uniform")[0] / stats("hdd-only", "qd16-uniform")[0]
    print(f"\nmeta-flash/hdd-only 4K randwrite QD16 ratio: {r:.2f}")
if "writeback" in layouts and "ceph-db-on-flash" in layouts and "qd16-uniform" in jobs:
    r = stats("writeback", "qd16-uniform")[0] / stats("ceph-db-on-flash", "qd16-uniform")[0]
    print(f"write-back/ceph-db-on-flash 4K randwrite QD16 ratio: {r:.2f}")
if "flash-cache" in layouts and "writeback" in layouts and "qd16-randread-hot" in jobs:
    r = stats("flash-cache", "qd16-randread-hot")[0] / stats("writeback", "qd16-randread-hot")[0]
    print(f"flash-cache/writeback 4K randread hot QD16 ratio: {r:.2f}")
if "writeback" in layouts and "hdd-only" in layouts and "qd16-uniform" in jobs:
    r = stats("writeback", "qd16-uniform")[0] / stats("hdd-only", "qd16-uniform")[0]
    print(f"write-back/hdd-only 4K randwrite QD16 ratio: {r:.2f}")
EOF
