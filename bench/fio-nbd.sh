#!/usr/bin/env bash
# fio-nbd.sh: fio's nbd engine against a cairn volume on a local dev cluster
# (3 hosts × 1 OSD, 3 copies) and against `nbdkit memory` (the cost of the NBD
# protocol alone on this machine), same jobs, alternating, one table.
#
#   bench/fio-nbd.sh
#
# Environment:
#   DURATION=15     seconds per job and target
#   SIZE=1G         volume size (and working-set size of the jobs)
#   WORKDIR=/tmp/cairn-fio-nbd
#   CAIRN_ETCD_PORT=24790 CAIRN_OSD_PORT=27800 CAIRN_NBD_PORT=20809 NBDKIT_PORT=20810
# Needs fio, nbdkit (apt-get install fio nbdkit) and python3.
set -euo pipefail

DURATION=${DURATION:-15}
SIZE=${SIZE:-1G}
WORKDIR=${WORKDIR:-/tmp/cairn-fio-nbd}
CAIRN_ETCD_PORT=${CAIRN_ETCD_PORT:-24790}
CAIRN_OSD_PORT=${CAIRN_OSD_PORT:-27800}
CAIRN_NBD_PORT=${CAIRN_NBD_PORT:-20809}
NBDKIT_PORT=${NBDKIT_PORT:-20810}
REPO=$(cd "$(dirname "$0")/.." && pwd)

BENCH=fio-nbd
. "$REPO/bench/lib.sh"
[[ $DURATION =~ ^[1-9][0-9]*$ ]] || die "DURATION must be a whole number of seconds, got '$DURATION'"
for t in fio nbdkit python3 go; do
	command -v $t >/dev/null || die "$t is not installed (apt-get install fio nbdkit)"
done

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	sleep 2
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	rm -rf "$WORKDIR"
}
trap cleanup EXIT
rm -rf "$WORKDIR" && mkdir -p "$WORKDIR"

log "building cairn"
(cd "$REPO" && go build -o "$WORKDIR/cairn" ./cmd/cairn)
CAIRN="$WORKDIR/cairn"
log "starting a cairn dev cluster (3 hosts × 1 OSD)"
"$CAIRN" dev --dir "$WORKDIR/dev" --hosts 3 --osds-per-host 1 --etcd-port "$CAIRN_ETCD_PORT" \
	--osd-port "$CAIRN_OSD_PORT" --nbd-port "$CAIRN_NBD_PORT" --lease-ttl 10s >"$WORKDIR/dev.log" 2>&1 &
pids+=($!)
for _ in $(seq 120); do grep -q "is up" "$WORKDIR/dev.log" && break; sleep 0.5; done
grep -q "is up" "$WORKDIR/dev.log" || die "cairn dev did not come up: $(tail "$WORKDIR/dev.log")"
"$CAIRN" --conf "$WORKDIR/dev/cairn.conf" volume create default/fio --size "$SIZE" >/dev/null
log "starting nbdkit memory $SIZE on port $NBDKIT_PORT"
nbdkit --foreground --port "$NBDKIT_PORT" --ipaddr 127.0.0.1 memory "$SIZE" &
pids+=($!)
sleep 1

CAIRN_URI="nbd://127.0.0.1:$CAIRN_NBD_PORT/default/fio"
MEM_URI="nbd://127.0.0.1:$NBDKIT_PORT/"
JOBS=(
	"4k-randwrite-qd1 randwrite 4k 1"
	"4k-randwrite-qd16 randwrite 4k 16"
	"4k-randread-qd16 randread 4k 16"
	"1m-write-qd4 write 1m 4"
	"1m-read-qd4 read 1m 4"
)
# Prefill both targets so reads read data, not holes.
for uri in "$CAIRN_URI" "$MEM_URI"; do
	log "prefilling $uri"
	fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1m --iodepth=4 --size="$SIZE" >/dev/null
done
for job in "${JOBS[@]}"; do
	read -r name rw bs qd <<<"$job"
	for target in cairn memory; do
		uri=$CAIRN_URI
		[[ $target == memory ]] && uri=$MEM_URI
		log "$name on $target"
		fio --name="$name" --ioengine=nbd --uri="$uri" --rw="$rw" --bs="$bs" --iodepth="$qd" \
			--size="$SIZE" --time_based --runtime="$DURATION" --ramp_time=2 --output-format=json \
			>"$WORKDIR/$name-$target.json"
	done
done

python3 - "$WORKDIR" "${JOBS[@]}" <<'EOF'
import json, sys
work, jobs = sys.argv[1], [j.split()[0] for j in sys.argv[2:]]
def stats(name, target):
    text = open(f"{work}/{name}-{target}.json").read()
    j = json.loads(text[text.index("{"):])["jobs"][0]  # fio may print notes first
    side = j["write"] if j["write"]["io_bytes"] else j["read"]
    lat = side["clat_ns"]["percentile"]
    return side["iops"], side["bw_bytes"] / 1e6, lat["50.000000"] / 1e3, lat["99.000000"] / 1e3
print(f"{'job':<20} {'cairn IOPS':>11} {'MB/s':>7} {'p50 µs':>8} {'p99 µs':>8} | {'memory IOPS':>11} {'MB/s':>7} {'p50 µs':>8} | {'cairn/memory':>12}")
for n in jobs:
    c, m = stats(n, "cairn"), stats(n, "memory")
    print(f"{n:<20} {c[0]:>11.0f} {c[1]:>7.1f} {c[2]:>8.0f} {c[3]:>8.0f} | {m[0]:>11.0f} {m[1]:>7.1f} {m[2]:>8.0f} | {c[0]/m[0]:>12.2f}")
EOF
