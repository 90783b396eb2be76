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
#
# (Ceph with its DB on flash joins the table when it is built.) One table at
# the end, and the lines "meta-flash/hdd-only 4K randwrite QD16 ratio: X.XX"
# and "write-back/hdd-only ...". Everything it makes
# (loop devices, mounts, throttle rules, processes, files) is removed on exit.
#
#   sudo bench/tier.sh                  # about 45 minutes (the 10-minute runs)
#   LONG=0 sudo -E bench/tier.sh        # about 10 minutes
#   DURATION=30 VOLUME=1G LONG=0 sudo -E bench/tier.sh
#
# Environment:
#   DURATION=60          seconds per fio job
#   LONG=1               also run QD16 uniform for 10 minutes on each layout
#                        (the steady state; 0: skip)
#   VOLUME=2G            volume size (the random writes' working set)
#   HDD_IOPS=200 HDD_MBPS=150   the "HDD"'s limits (each direction)
#   HDD_SIZE=8G          sparse file behind each loop device
#   LAYOUTS="hdd-only meta-flash writeback"   which layouts to run
#   WRITEBACK=4G         each OSD's write-back area (layout writeback)
#   JOBS="qd16-uniform qd1-uniform qd16-zipf"   which 60-second jobs to run
#   WORKDIR=/tmp/cairn-tier         (the daemons' logs stay in WORKDIR-logs)
#   CAIRN_ETCD_PORT=24890 CAIRN_OSD_PORT=27890 CAIRN_NBD_PORT=20909
# Needs root (loop devices, mount, cgroup), fio, losetup, mkfs.ext4, python3, go.
set -euo pipefail

DURATION=${DURATION:-60}
LONG=${LONG:-1}
VOLUME=${VOLUME:-2G}
HDD_IOPS=${HDD_IOPS:-200}
HDD_MBPS=${HDD_MBPS:-150}
HDD_SIZE=${HDD_SIZE:-8G}
WORKDIR=${WORKDIR:-/tmp/cairn-tier}
LAYOUTS=${LAYOUTS:-hdd-only meta-flash writeback}
WRITEBACK=${WRITEBACK:-4G}
JOBS=${JOBS:-qd16-uniform qd1-uniform qd16-zipf}
CAIRN_ETCD_PORT=${CAIRN_ETCD_PORT:-24890}
CAIRN_OSD_PORT=${CAIRN_OSD_PORT:-27890}
CAIRN_NBD_PORT=${CAIRN_NBD_PORT:-20909}
OSDS=3
THROTTLE=/sys/fs/cgroup/blkio
REPO=$(cd "$(dirname "$0")/.." && pwd)

BENCH=tier
. "$REPO/bench/lib.sh"
[[ $DURATION =~ ^[1-9][0-9]*$ ]] || die "DURATION must be a whole number of seconds, got '$DURATION'"
[[ $(id -u) == 0 ]] || die "needs root: loop devices, mounts and the block throttle"
[[ -w $THROTTLE/blkio.throttle.write_iops_device ]] || die "no cgroup v1 block throttle at $THROTTLE"
for t in fio losetup mkfs.ext4 python3 go; do
	command -v $t >/dev/null || die "$t is not installed (apt-get install fio util-linux e2fsprogs)"
done

loops=()
cluster=""
cleanup() {
	set +e
	stop_cluster
	rm -rf "$WORKDIR-logs" && mkdir -p "$WORKDIR-logs"
	for l in "$WORKDIR"/*/dev/*.log "$WORKDIR"/*.json; do
		[[ -e $l ]] && cp "$l" "$WORKDIR-logs/$(basename "$(dirname "$(dirname "$l")")")-$(basename "$l")"
	done
	for dev in "${loops[@]}"; do
		unthrottle "$dev"
		umount "$WORKDIR/hdd-$(basename "$dev")" 2>/dev/null
		losetup -d "$dev"
	done
	rm -rf "$WORKDIR"
}
trap cleanup EXIT

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
	[[ $layout == writeback ]] && wb=(--writeback-size "$WRITEBACK")
	for i in $(seq 0 $((OSDS - 1))); do
		local hdd=$WORKDIR/hdd-$(basename "${loops[$i]}")/$layout-osd.$i
		mkdir -p "$hdd"
		ln -s "$hdd" "$dir/dev/osd.$i"
		if [[ $layout == meta-flash || $layout == writeback ]]; then
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

# run_jobs LAYOUT: the fio jobs against the running cluster's volume.
run_jobs() {
	local layout=$1 uri="nbd://127.0.0.1:$CAIRN_NBD_PORT/default/tier"
	local jobs=("qd16-uniform 16 random $DURATION" "qd1-uniform 1 random $DURATION" "qd16-zipf 16 zipf:1.2 $DURATION")
	[[ $LONG == 1 ]] && jobs+=("qd16-uniform-10min 16 random 600")
	for job in "${jobs[@]}"; do
		read -r name qd dist secs <<<"$job"
		[[ $name == *-10min || " $JOBS " == *" $name "* ]] || continue
		log "$layout: 4 KiB random writes, $name, ${secs}s"
		fio --name="$name" --ioengine=nbd --uri="$uri" --rw=randwrite --bs=4k --iodepth="$qd" \
			--random_distribution="$dist" --size="$VOLUME" --time_based --runtime="$secs" \
			--ramp_time=5 --output-format=json >"$WORKDIR/$layout-$name.json" ||
			log "$layout $name: fio reported an error (a write failed): see its output and the daemons' logs in $WORKDIR-logs"
		# What the OSDs hold that has not reached their HDDs, as fio ends.
		"$CAIRN" --conf "$WORKDIR/$layout/dev/cairn.conf" osd df >&2 || true
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
	start_cluster "$layout"
	run_jobs "$layout"
	stop_cluster
done

python3 - "$WORKDIR" "$LONG" "$JOBS" $LAYOUTS <<'EOF'
import json, sys
work, long, wanted, layouts = sys.argv[1], sys.argv[2] == "1", sys.argv[3].split(), sys.argv[4:]
def stats(layout, name):
    text = open(f"{work}/{layout}-{name}.json").read()
    j = json.loads(text[text.index("{"):])["jobs"][0]
    w = j["write"]
    lat = w["clat_ns"]["percentile"]
    return w["iops"], lat["50.000000"] / 1e6, lat["99.000000"] / 1e6, w["clat_ns"]["max"] / 1e6, j.get("error", 0)
jobs = [n for n in ["qd16-uniform", "qd1-uniform", "qd16-zipf"] if n in wanted] + (["qd16-uniform-10min"] if long else [])
print("| layout | job | IOPS | p50 ms | p99 ms | max ms | fio error |")
print("|---|---|---|---|---|---|---|")
for layout in layouts:
    for n in jobs:
        i, p50, p99, mx, err = stats(layout, n)
        print(f"| {layout} | 4K randwrite {n} | {i:.0f} | {p50:.2f} | {p99:.2f} | {mx:.0f} | {err or ''} |")
if "meta-flash" in layouts and "hdd-only" in layouts and "qd16-uniform" in jobs:
    r = stats("meta-flash", "qd16-uniform")[0] / stats("hdd-only", "qd16-uniform")[0]
    print(f"\nmeta-flash/hdd-only 4K randwrite QD16 ratio: {r:.2f}")
if "writeback" in layouts and "hdd-only" in layouts and "qd16-uniform" in jobs:
    r = stats("writeback", "qd16-uniform")[0] / stats("hdd-only", "qd16-uniform")[0]
    print(f"write-back/hdd-only 4K randwrite QD16 ratio: {r:.2f}")
EOF
