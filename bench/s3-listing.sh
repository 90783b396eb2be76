#!/usr/bin/env bash
# s3-listing.sh: does a listing page cost the same whatever the bucket holds?
# One bucket on a cairn dev (3 hosts x 1 OSD, 3 copies) grows by PUTs of
# 1-byte objects through the S3 gateway (bench/s3load, aws-sdk-go-v2) to each
# size of STAGES in turn, or with GROW=fill by `cairn s3 bucket fill` (a
# thousand objects per index transaction: 10^7 keys in minutes, where PUTs
# take hours here); at each, LIST_CLIENTS clients ask for
# ListObjectsV2 pages of 1,000 keys starting after a key chosen at random
# (each page checked: the keys that follow, in order) for DURATION seconds.
# One table: keys, index shards (cairn s3 bucket stat), pages/s, p50, p99
# and max latency of a page, and the last line
# "page p99 largest/smallest bucket ratio: X.XX".
#
#   bench/s3-listing.sh                          # 10^4, 10^5 and 10^6 keys: about 15 minutes
#   STAGES="10000 100000" bench/s3-listing.sh    # a quick look
#   GROW=fill STAGES="10000 1000000 10000000" bench/s3-listing.sh
#
# With ALTERNATE=N, a second bucket of the first stage's size is then
# filled and the two are listed in turn for N rounds, in one cluster.
#
# Environment: STAGES="10000 100000 1000000" (keys, ascending), GROW=put, ALTERNATE=0, DURATION=15,
# PUT_CLIENTS=16, LIST_CLIENTS=4, WORKDIR=/tmp/cairn-s3list,
# CAIRN_ETCD_PORT=25790 CAIRN_OSD_PORT=28790 CAIRN_NBD_PORT=21809
# CAIRN_S3_PORT=29790. Needs go and python3.
set -euo pipefail

STAGES=${STAGES:-10000 100000 1000000}
GROW=${GROW:-put}
ALTERNATE=${ALTERNATE:-0}
DURATION=${DURATION:-15}
PUT_CLIENTS=${PUT_CLIENTS:-16}
LIST_CLIENTS=${LIST_CLIENTS:-4}
WORKDIR=${WORKDIR:-/tmp/cairn-s3list}
CAIRN_ETCD_PORT=${CAIRN_ETCD_PORT:-25790}
CAIRN_OSD_PORT=${CAIRN_OSD_PORT:-28790}
CAIRN_NBD_PORT=${CAIRN_NBD_PORT:-21809}
CAIRN_S3_PORT=${CAIRN_S3_PORT:-29790}
REPO=$(cd "$(dirname "$0")/.." && pwd)
BENCH=s3-listing
. "$REPO/bench/lib.sh"
command -v go >/dev/null || die "go is not installed"
[[ $ALTERNATE =~ ^[0-9]+$ ]] || die "ALTERNATE must be a whole number of rounds, got '$ALTERNATE'"
[[ $GROW == put || $GROW == fill ]] || die "GROW must be put or fill, got '$GROW'"
[[ $DURATION =~ ^[1-9][0-9]*$ ]] || die "DURATION must be a whole number of seconds, got '$DURATION'"
prev=0
for n in $STAGES; do
	[[ $n =~ ^[1-9][0-9]*$ && $n -gt $prev ]] || die "STAGES must be ascending whole numbers of keys, got '$STAGES'"
	prev=$n
done

dev_cleanup_traps
rm -rf "$WORKDIR" && mkdir -p "$WORKDIR"
log "building cairn and s3load"
build_rev . "$WORKDIR/cairn"
(cd "$REPO" && go build -o "$WORKDIR/s3load" ./bench/s3load)
start_dev "$WORKDIR/cairn" 1 "$CAIRN_S3_PORT"
creds=$WORKDIR/dev/s3.json
# load [-bucket B] ARGS: s3load on bucket listing (or B).
load() { "$WORKDIR/s3load" -creds "$creds" -bucket listing -prefix k -json "$@"; }
# fill BUCKET FIRST N: writes keys FIRST.. with `cairn s3 bucket fill` and
# prints {"objects_per_s": …} as s3load does; the bucket is made by a PUT first.
fill() {
	[[ $2 -gt 0 ]] || load -bucket "$1" -op put -size 1 -clients 1 -max-objects 1 -duration 1m >/dev/null || die "could not create bucket $1"
	local first=$(($2 > 0 ? $2 : 1)) n=$(($2 > 0 ? $3 : $3 - 1)) t0 t1
	t0=$(date +%s.%N)
	"$WORKDIR/cairn" --conf "$WORKDIR/dev/cairn.conf" s3 bucket fill "$1" --prefix k --first "$first" --objects "$n" >&2 ||
		die "the fill failed"
	t1=$(date +%s.%N)
	python3 -c "import sys; print('{\"objects_per_s\": %f}' % (int(sys.argv[1]) / (float(sys.argv[3]) - float(sys.argv[2]))))" "$n" "$t0" "$t1"
}

have=0
for n in $STAGES; do
	if [[ $GROW == put ]]; then
		log "putting keys $have to $((n - 1)) ($PUT_CLIENTS clients)"
		load -op put -size 1 -clients "$PUT_CLIENTS" -first "$have" -max-objects $((n - have)) -duration 10h >"$WORKDIR/put-$n.json" ||
			die "the PUTs failed: $(cat "$WORKDIR/put-$n.json")"
	else
		log "filling keys $have to $((n - 1)) (cairn s3 bucket fill)"
		fill listing "$have" $((n - have)) >"$WORKDIR/put-$n.json"
	fi
	have=$n
	shards=$("$WORKDIR/cairn" --conf "$WORKDIR/dev/cairn.conf" s3 bucket stat listing --json |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["index_shards"])')
	log "$n keys in $shards index shards: listing pages for ${DURATION}s ($LIST_CLIENTS clients)"
	load -op list -objects "$n" -clients "$LIST_CLIENTS" -duration "${DURATION}s" -label "$shards" >"$WORKDIR/list-$n.json" ||
		die "the listing failed: $(cat "$WORKDIR/list-$n.json")"
done

# Both buckets in one cluster, listed in turn: what the bucket's size costs
# a page, with the store's size and the machine's load the same for both.
if [[ $ALTERNATE -gt 0 ]]; then
	small=${STAGES%% *}
	log "bucket small: $small keys, listed in turn with the $have-key bucket for $ALTERNATE rounds"
	fill small 0 "$small" >/dev/null
	for r in $(seq 1 "$ALTERNATE"); do
		order="small listing"
		((r % 2)) || order="listing small"
		for b in $order; do
			objects=$small
			[[ $b == listing ]] && objects=$have
			load -bucket "$b" -op list -objects "$objects" -clients "$LIST_CLIENTS" -duration "${DURATION}s" -label "$b" >"$WORKDIR/alt-$r-$b.json" ||
				die "the listing failed: $(cat "$WORKDIR/alt-$r-$b.json")"
		done
	done
fi

python3 - "$WORKDIR" "$GROW" "$ALTERNATE" $STAGES <<'PY'
import json, statistics, sys
work, alternate, stages = sys.argv[1], int(sys.argv[3]), sys.argv[4:]
print(f"| keys | index shards | {'PUT' if sys.argv[2] == 'put' else 'fill'} objects/s while growing | pages/s | page p50 ms | page p99 ms | page max ms |")
print("|---:|---:|---:|---:|---:|---:|---:|")
rows = []
for n in stages:
    put = json.load(open(f"{work}/put-{n}.json"))
    r = json.load(open(f"{work}/list-{n}.json"))
    rows.append(r)
    print(f"| {int(n):,} | {r['label']} | {put['objects_per_s']:,.0f} | {r['objects_per_s']:,.1f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['max_ms']:.1f} |")
print(f"\npage p99 largest/smallest bucket ratio: {rows[-1]['p99_ms'] / rows[0]['p99_ms']:.2f}")
if alternate:
    print(f"\n| round | {int(stages[0]):,} keys p50 ms | p99 ms | {int(stages[-1]):,} keys p50 ms | p99 ms | p99 ratio |")
    print("|---:|---:|---:|---:|---:|---:|")
    ratios = []
    for r in range(1, alternate + 1):
        a, b = (json.load(open(f"{work}/alt-{r}-{x}.json")) for x in ("small", "listing"))
        ratios.append(b["p99_ms"] / a["p99_ms"])
        print(f"| {r} | {a['p50_ms']:.2f} | {a['p99_ms']:.2f} | {b['p50_ms']:.2f} | {b['p99_ms']:.2f} | {ratios[-1]:.2f} |")
    print(f"\nin turn, page p99 largest/smallest bucket, median of {alternate} rounds: {statistics.median(ratios):.2f}")
PY
