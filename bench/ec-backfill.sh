#!/usr/bin/env bash
# ec-backfill.sh: how long an out OSD's positions of an erasure-coded pool
# take to be recovered on the OSDs placement moves them to, and the OSDs'
# CPU over it. A cairn dev of 3 hosts x 2 OSDs, a K+M pool with one shard
# per host; cairn bench writes 4 MiB objects for WRITE seconds, then
# osd.1 is marked out and the clock runs until every PG is active+clean.
# For cairn built from each of REVS (git revisions; "." the working tree),
# alternating ROUNDS times; one table, and the line
# "backfill seconds, last/first revision: X.XX".
#
#   REVS="18c834b ." ROUNDS=2 bench/ec-backfill.sh   # before and after
#
# Environment: WRITE=20, EC=2+1, PGS=32, REVS=., ROUNDS=1,
# WORKDIR=/tmp/cairn-ecbackfill, CAIRN_ETCD_PORT=25990 CAIRN_OSD_PORT=28990
# CAIRN_NBD_PORT=21919. The objects take about 1.5 x (written bytes) of disk
# (700 MiB/s for 20 s: 20 GiB); the work directory goes at the end. Needs go,
# git, python3.
set -euo pipefail

WRITE=${WRITE:-20}
EC=${EC:-2+1}
PGS=${PGS:-32}
REVS=${REVS:-.}
ROUNDS=${ROUNDS:-1}
WORKDIR=${WORKDIR:-/tmp/cairn-ecbackfill}
CAIRN_ETCD_PORT=${CAIRN_ETCD_PORT:-25990}
CAIRN_OSD_PORT=${CAIRN_OSD_PORT:-28990}
CAIRN_NBD_PORT=${CAIRN_NBD_PORT:-21919}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BENCH=ec-backfill
. "$REPO/bench/lib.sh"
for t in go git python3; do command -v $t >/dev/null || die "$t is not installed"; done
[[ $WRITE =~ ^[1-9][0-9]*$ ]] || die "WRITE must be a whole number of seconds, got '$WRITE'"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a whole number, got '$ROUNDS'"

dev_cleanup_traps



clean() { # clean BIN CONF: every PG active+clean
	"$1" --conf "$2" --json status | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(d["pgs_active_clean"] != d["pgs"])'
}

# run BIN REV ROUND: one measurement, a table row on stdout.
run() {
	local bin=$1 conf=$WORKDIR/dev/cairn.conf mib t0 t1 c0 c1
	start_dev "$bin" 2
	CAIRN_EXPERIMENTAL_EC=1 "$bin" --conf "$conf" pool create ec --ec "$EC" --pg-num "$PGS" >/dev/null
	log "round $3: $2: writing ${WRITE}s of 4 MiB objects"
	mib=$("$bin" --conf "$conf" --json bench ec write -d "${WRITE}s" --no-cleanup 2>/dev/null |
		python3 -c 'import json,sys; print(round(json.load(sys.stdin)["bytes"] / 2**20))')
	c0=$(osd_cpu "$bin")
	t0=$(date +%s.%N)
	"$bin" --conf "$conf" osd out 1 >/dev/null
	sleep 1
	until clean "$bin" "$conf"; do
		(($(date +%s) - ${t0%.*} < 600)) || die "the PGs were not clean 600 s after the out"
		sleep 0.5
	done
	t1=$(date +%s.%N)
	c1=$(osd_cpu "$bin")
	stop_dev
	printf '| %s | %s | %s | %s |\n' "$3" "$2" "$mib" "$(echo "$t0 $t1 $c0 $c1" | awk '{ printf "%.1f | %.1f", $2 - $1, $4 - $3 }')"
}

rm -rf "$WORKDIR" && mkdir -p "$WORKDIR"
read -ra revs <<<"$REVS"
for i in "${!revs[@]}"; do
	log "building ${revs[$i]}"
	build_rev "${revs[$i]}" "$WORKDIR/bin.$i"
done
echo "| round | revision | MiB written | seconds to clean after the out | OSD CPU-s |"
echo "|---:|---|---:|---:|---:|"
rows=$WORKDIR/rows
for round in $(seq "$ROUNDS"); do
	for i in "${!revs[@]}"; do
		run "$WORKDIR/bin.$i" "${revs[$i]}" "$round" | tee -a "$rows"
	done
done
awk -F'|' -v first="${revs[0]}" -v last="${revs[${#revs[@]}-1]}" '
	{ gsub(/ /, "", $3); if ($3 == first) { f += $5; nf++ } if ($3 == last) { l += $5; nl++ } }
	END { if (nf && nl && f > 0) printf "\nbackfill seconds, last/first revision: %.2f\n", (l / nl) / (f / nf) }' "$rows"
