#!/usr/bin/env bash
# ec-seq-overwrite.sh: sequential writes through fio's nbd engine to a
# volume on an erasure-coded K+M pool and to one on the 3-copy pool of the
# same cluster (cairn dev, 3 hosts x 1 OSD): a first pass over fresh
# objects, then a second over the same bytes, for cairn built from each of
# REVS (git revisions; "." the working tree), alternating ROUNDS times.
# One table (MiB/s), and the line "EC/3-copy overwrite ratio: X.XX" for
# the last revision.
#
#   REVS="e17078a~1 ." ROUNDS=2 bench/ec-seq-overwrite.sh   # before and after
#   BS=1M bench/ec-seq-overwrite.sh
#
# Environment: BS=4M (fio's block size), VOLUME=1G, QD=8, EC=2+1, REVS=.,
# ROUNDS=1, WORKDIR=/tmp/cairn-ecseq, CAIRN_ETCD_PORT=26090
# CAIRN_OSD_PORT=29090 CAIRN_NBD_PORT=21929. Needs fio, go, git, python3.
set -euo pipefail

BS=${BS:-4M}
VOLUME=${VOLUME:-1G}
QD=${QD:-8}
EC=${EC:-2+1}
REVS=${REVS:-.}
ROUNDS=${ROUNDS:-1}
WORKDIR=${WORKDIR:-/tmp/cairn-ecseq}
CAIRN_ETCD_PORT=${CAIRN_ETCD_PORT:-26090}
CAIRN_OSD_PORT=${CAIRN_OSD_PORT:-29090}
CAIRN_NBD_PORT=${CAIRN_NBD_PORT:-21929}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BENCH=ec-seq-overwrite
. "$REPO/bench/lib.sh"
for t in fio go git python3; do command -v $t >/dev/null || die "$t is not installed"; done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a whole number, got '$ROUNDS'"

dev_cleanup_traps

# pass VOLUME: one sequential pass over the volume; prints MiB/s.
pass() {
	fio --name=seq --ioengine=nbd --uri="nbd://127.0.0.1:$CAIRN_NBD_PORT/$1" --rw=write --bs="$BS" \
		--iodepth="$QD" --size="$VOLUME" --output-format=json 2>/dev/null |
		python3 -c 'import json,sys; s=sys.stdin.read(); print(round(json.loads(s[s.index("{"):])["jobs"][0]["write"]["bw_bytes"] / 2**20))'
}

# run BIN REV ROUND: one cluster, both volumes, a table row on stdout.
run() {
	local bin=$1 conf=$WORKDIR/dev/cairn.conf row
	start_dev "$bin" 1
	CAIRN_EXPERIMENTAL_EC=1 "$bin" --conf "$conf" pool create ec --ec "$EC" >/dev/null
	row="| $3 | $2"
	for pool in ec default; do
		"$bin" --conf "$conf" volume create "$pool/vol" --size "$VOLUME" >/dev/null
		log "round $3: $2: $pool: two passes of $BS writes"
		row="$row | $(pass "$pool/vol") | $(pass "$pool/vol")"
	done
	stop_dev
	echo "$row |"
}

rm -rf "$WORKDIR" && mkdir -p "$WORKDIR"
read -ra revs <<<"$REVS"
for i in "${!revs[@]}"; do
	log "building ${revs[$i]}"
	build_rev "${revs[$i]}" "$WORKDIR/bin.$i"
done
echo "| round | revision | $EC first pass | $EC overwrite | 3 copies first pass | 3 copies overwrite |"
echo "|---:|---|---:|---:|---:|---:|"
last=""
for round in $(seq "$ROUNDS"); do
	for i in "${!revs[@]}"; do
		last=$(run "$WORKDIR/bin.$i" "${revs[$i]}" "$round")
		echo "$last"
	done
done
echo "$last" | awk -F'|' '{ printf "\nEC/3-copy overwrite ratio: %.2f\n", $5 / $7 }'
