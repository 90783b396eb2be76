#!/usr/bin/env bash
# ec-volume.sh: 4 KiB random writes and reads, fio's nbd engine at QD, to a
# volume on an erasure-coded K+M pool and to one on the 3-copy pool of the
# same cluster (cairn dev, 3 hosts x OSDS_PER_HOST), for cairn built from each of
# REVS (git revisions; "." is the working tree), the revisions alternating
# ROUNDS times. One table: IOPS, p99, and the OSDs' CPU seconds per 1,000
# IOs (from /proc), and the line "EC/3-copy 4K randwrite QD16 ratio: X.XX"
# for the last revision (QD as set).
#
#   bench/ec-volume.sh                                # this tree, once
#   REVS="HEAD~3 ." ROUNDS=2 bench/ec-volume.sh       # before and after
#   SNAPSHOT=1 bench/ec-volume.sh                     # under a snapshot
#
# SNAPSHOT=1 takes a snapshot of each volume once it is written, so the
# random writes run under it: each object's first write clones it.
# Environment: DURATION=15 (seconds of each fio job, after a 2 s ramp),
# VOLUME=512M (each volume, written whole in 1 MiB writes first), QD=16,
# EC=2+1, EC_FLAGS= (more flags of the pool's create, e.g. "--failure-domain
# osd" for 4+2 with OSDS_PER_HOST=2), OSDS_PER_HOST=1, REVS=., ROUNDS=1, WORKDIR=/tmp/cairn-ecvol, CAIRN_ETCD_PORT=25890
# CAIRN_OSD_PORT=28890 CAIRN_NBD_PORT=21909. Needs fio, go, git, python3.
set -euo pipefail

DURATION=${DURATION:-15}
VOLUME=${VOLUME:-512M}
QD=${QD:-16}
EC=${EC:-2+1}
EC_FLAGS=${EC_FLAGS:-}
OSDS_PER_HOST=${OSDS_PER_HOST:-1}
REVS=${REVS:-.}
ROUNDS=${ROUNDS:-1}
SNAPSHOT=${SNAPSHOT:-0}
WORKDIR=${WORKDIR:-/tmp/cairn-ecvol}
CAIRN_ETCD_PORT=${CAIRN_ETCD_PORT:-25890}
CAIRN_OSD_PORT=${CAIRN_OSD_PORT:-28890}
CAIRN_NBD_PORT=${CAIRN_NBD_PORT:-21909}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BENCH=ec-volume
. "$REPO/bench/lib.sh"
for t in fio go git python3; do command -v $t >/dev/null || die "$t is not installed"; done
[[ $DURATION =~ ^[1-9][0-9]*$ ]] || die "DURATION must be a whole number of seconds, got '$DURATION'"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a whole number, got '$ROUNDS'"

dev_cleanup_traps


start_cluster() {
	local bin=$1 dir=$WORKDIR/dev
	start_dev "$bin" "$OSDS_PER_HOST"
	# shellcheck disable=SC2086 # EC_FLAGS is a list of flags
	CAIRN_EXPERIMENTAL_EC=1 "$bin" --conf "$dir/cairn.conf" pool create ec --ec "$EC" $EC_FLAGS >/dev/null
	"$bin" --conf "$dir/cairn.conf" volume create ec/vol --size "$VOLUME" >/dev/null
	"$bin" --conf "$dir/cairn.conf" volume create default/vol --size "$VOLUME" >/dev/null
}



# run_fio BIN N POOL RW: one fio job on POOL's volume; its JSON and the
# OSDs' CPU over it go to WORKDIR/N-POOL-RW.*.
run_fio() {
	local bin=$1 n=$2 pool=$3 rw=$4 c0
	c0=$(osd_cpu "$bin")
	fio --name="$pool-$rw" --ioengine=nbd --uri="nbd://127.0.0.1:$CAIRN_NBD_PORT/$pool/vol" --rw="$rw" --bs=4k \
		--iodepth="$QD" --size="$VOLUME" --time_based --runtime="$DURATION" --ramp_time=2 \
		--output-format=json >"$WORKDIR/$n-$pool-$rw.json" || log "fio $pool $rw reported an error"
	echo "$c0 $(osd_cpu "$bin")" >"$WORKDIR/$n-$pool-$rw.cpu"
}

rm -rf "$WORKDIR" && mkdir -p "$WORKDIR"
read -ra revs <<<"$REVS"
for i in "${!revs[@]}"; do
	log "building ${revs[$i]}"
	build_rev "${revs[$i]}" "$WORKDIR/bin.$i"
done
for round in $(seq "$ROUNDS"); do
	for i in "${!revs[@]}"; do
		bin=$WORKDIR/bin.$i
		log "round $round: ${revs[$i]}: a cluster with a $EC pool and a 3-copy pool, a $VOLUME volume on each"
		start_cluster "$bin"
		for pool in ec default; do
			fio --name=fill --ioengine=nbd --uri="nbd://127.0.0.1:$CAIRN_NBD_PORT/$pool/vol" --rw=write --bs=1m \
				--iodepth=4 --size="$VOLUME" >/dev/null || die "writing the $pool volume failed"
			if [[ $SNAPSHOT == 1 ]]; then
				"$bin" --conf "$WORKDIR/dev/cairn.conf" volume snap create "$pool/vol@bench" >/dev/null
			fi
		done
		for pool in ec default; do
			for rw in randwrite randread; do
				log "round $round: ${revs[$i]}: $pool $rw ${DURATION}s"
				run_fio "$bin" "$round.$i" "$pool" "$rw"
			done
		done
		stop_dev
	done
done

python3 - "$WORKDIR" "$ROUNDS" "$EC" "$QD" "${revs[@]}" <<'EOF'
import json, sys
work, rounds, ec, qd, revs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
def job(n, pool, rw):
    text = open(f"{work}/{n}-{pool}-{rw}.json").read()
    j = json.loads(text[text.index("{"):])["jobs"][0]
    side = j["write"] if rw == "randwrite" else j["read"]
    c0, c1 = map(float, open(f"{work}/{n}-{pool}-{rw}.cpu").read().split())
    ios = side["total_ios"] or 1
    return side["iops"], side["clat_ns"]["percentile"]["99.000000"] / 1e6, 1000 * (c1 - c0) / ios
print(f"| round | revision | volume | job | IOPS | p99 ms | OSD CPU-s per 1,000 IOs |")
print("|---|---|---|---|---:|---:|---:|")
for r in range(1, rounds + 1):
    for i, rev in enumerate(revs):
        for pool in ["ec", "default"]:
            for rw in ["randwrite", "randread"]:
                iops, p99, cpu = job(f"{r}.{i}", pool, rw)
                name = ec if pool == "ec" else "3 copies"
                print(f"| {r} | {rev} | {name} | 4K {rw} | {iops:,.0f} | {p99:.1f} | {cpu:.2f} |")
last = f"{rounds}.{len(revs) - 1}"
ratio = job(last, "ec", "randwrite")[0] / job(last, "default", "randwrite")[0]
print(f"\nEC/3-copy 4K randwrite QD{qd} ratio: {ratio:.2f}")
EOF
