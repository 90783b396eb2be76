# shellcheck shell=bash
# Shared by the bench scripts: `. "$REPO/bench/lib.sh"` after setting
# BENCH to the script's name. log prints a timestamped line to stderr; die
# prints an error and exits; alive and stop_pids watch and stop processes
# by pid; build_rev, start_dev, stop_dev, dev_cleanup_traps and osd_cpu
# build cairn at a revision, run a dev cluster of it and read its OSDs' CPU
# (the scripts comparing revisions); ceph_* bring up and stop a
# throwaway one-machine Ceph cluster (compare-ceph.sh, tier.sh).
log() { printf '%s [%s] %s\n' "$(date +%H:%M:%S)" "$BENCH" "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

# --- revisions ---------------------------------------------------------------

# build_rev REV OUT: cairn of git revision REV ("." the working tree of
# $REPO) built as OUT; a revision is unpacked beside OUT first.
build_rev() {
	local rev=$1 out=$2 src=$2.src
	if [[ $rev == . ]]; then
		(cd "$REPO" && go build -o "$out" ./cmd/cairn)
		return
	fi
	mkdir -p "$src"
	git -C "$REPO" archive "$rev" | tar -x -C "$src"
	(cd "$src" && go build -o "$out" ./cmd/cairn)
}

# start_dev BIN PER_HOST [S3_PORT]: a cairn dev of 3 hosts x PER_HOST OSDs
# in $WORKDIR/dev (erasure coding on), on $CAIRN_ETCD_PORT, $CAIRN_OSD_PORT
# and $CAIRN_NBD_PORT, no metrics or dashboard, and no S3 gateway unless
# S3_PORT is given (its endpoint and keys in $WORKDIR/dev/s3.json); its pid
# in $cluster; more cairn dev flags in $DEV_FLAGS. It returns once the
# cluster is up.
start_dev() {
	local bin=$1 dir=$WORKDIR/dev s3=${3:-0}
	rm -rf "$dir"
	CAIRN_EXPERIMENTAL_EC=1 "$bin" dev --dir "$dir" --hosts 3 --osds-per-host "$2" --etcd-port "$CAIRN_ETCD_PORT" \
		--osd-port "$CAIRN_OSD_PORT" --nbd-port "$CAIRN_NBD_PORT" --s3-port "$s3" --metrics-port 0 \
		--dashboard-port 0 ${DEV_FLAGS:-} >"$WORKDIR/dev.log" 2>&1 &
	cluster=$!
	for _ in $(seq 240); do grep -q "is up" "$WORKDIR/dev.log" && break; sleep 0.5; done
	grep -q "is up" "$WORKDIR/dev.log" || die "cairn dev did not come up: $(tail "$WORKDIR/dev.log")"
	[[ $s3 == 0 || -f $dir/s3.json ]] || die "cairn dev wrote no $dir/s3.json"
}

# stop_dev: stops the dev cluster start_dev started, if it runs.
stop_dev() {
	[[ -n ${cluster:-} ]] || return 0
	stop_pids 20 "$cluster"
	cluster=""
}

# dev_cleanup_traps: on exit (and on INT or TERM) stop the dev cluster and
# remove $WORKDIR.
dev_cleanup_traps() {
	cluster=""
	trap 'set +e; stop_dev; rm -rf "$WORKDIR"' EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

# osd_cpu BIN: CPU seconds the OSD processes of cairn binary BIN have used.
osd_cpu() {
	local p total=0
	for p in $(pgrep -f "^$1 osd "); do
		total=$((total + $(awk '{ print $14 + $15 }' "/proc/$p/stat")))
	done
	echo "$total $(getconf CLK_TCK)" | awk '{ print $1 / $2 }'
}

# --- processes -------------------------------------------------------------

# alive PID: the process exists and is not a zombie.
alive() {
	local st
	[[ -r /proc/$1/stat ]] || return 1
	st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	st=${st##*) }
	[[ ${st:0:1} != Z ]]
}

# stop_pids SECONDS PID...: SIGTERM, wait up to SECONDS for all, then SIGKILL,
# then reap the ones that are our children.
stop_pids() {
	local grace=$1 p deadline
	shift
	for p in "$@"; do
		[[ -n $p ]] && alive "$p" && kill -TERM "$p" 2>/dev/null
	done
	deadline=$((SECONDS + grace))
	for p in "$@"; do
		[[ -n $p ]] || continue
		while alive "$p" && ((SECONDS < deadline)); do sleep 0.2; done
		if alive "$p"; then
			log "pid $p did not stop within ${grace}s: SIGKILL"
			kill -KILL "$p" 2>/dev/null
		fi
	done
	for p in "$@"; do
		[[ -n $p ]] && wait "$p" 2>/dev/null
	done
	return 0
}

port_free() { ! ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }

# --- a throwaway one-machine Ceph cluster ------------------------------------
#
# ceph_start starts 1 mon, 1 mgr and NOSDS BlueStore OSDs as plain background
# processes of this shell in CEPH_DIR (a fresh directory the caller made), all
# on 127.0.0.1 (mon on CEPH_MON_V2_PORT and CEPH_MON_V1_PORT, daemons from
# CEPH_OSD_PORT_MIN), with authentication off, one copy per OSD (the failure
# domain is the OSD) and CEPH_EXTRA_CONF added to [global]: above all where
# each OSD's BlueStore devices are ($id is the OSD's number, 0 to NOSDS-1). It
# waits until the OSDs are up and in. ceph_pool_create POOL PGS APP makes a
# replicated pool (size 3, min_size 2, autoscaler off); ceph_wait waits for
# its PGs, ceph_healthy for HEALTH_OK; ceph_stop stops the daemons by pid.
# The caller's cleanup trap calls ceph_stop, then removes CEPH_DIR.
CEPH_DIR=""
CEPH_CONF=""
CEPH_MON_PID=""
CEPH_MGR_PID=""
CEPH_OSD_PIDS=()

ceph_cli() { timeout 60 ceph -c "$CEPH_CONF" --connect-timeout 30 "$@"; }

ceph_logs() {
	local f
	for f in "$CEPH_DIR"/log/*.log "$CEPH_DIR"/log/*.out; do
		[[ -s $f ]] || continue
		printf '\n--- last lines of %s ---\n' "$f" >&2
		tail -n 15 "$f" >&2
	done
}

ceph_die() {
	ceph_logs
	die "$*"
}

# ceph_py ready OSDS PGS | health: judges `ceph status -f json` (are OSDS
# OSDs up and in, PGS PGs active+clean?) or `ceph health detail -f json` (is
# it HEALTH_OK, or a warning only of checks a throwaway cluster may ignore?)
# on stdin; prints what it saw, exits 0 when it is so.
ceph_py() {
	python3 -c '
import json, sys

def ceph_ready(status_json, want_osds, want_pgs):
    s = json.loads(status_json)
    om = s.get("osdmap", {})
    om = om.get("osdmap", om)  # older layouts nest it
    up, inn = om.get("num_up_osds", 0), om.get("num_in_osds", 0)
    msg = f"osds {up} up / {inn} in of {want_osds}"
    if up < want_osds or inn < want_osds:
        return False, msg
    if want_pgs:
        pm = s.get("pgmap", {})
        total = pm.get("num_pgs", 0)
        states = {x["state_name"]: x["count"] for x in pm.get("pgs_by_state", [])}
        msg += f"; pgs {total}: " + ", ".join(f"{v} {k}" for k, v in states.items())
        if total < want_pgs or states.get("active+clean", 0) != total:
            return False, msg
    return True, msg

IGNORABLE = {"MON_DISK_LOW", "POOL_APP_NOT_ENABLED", "AUTH_INSECURE_GLOBAL_ID_RECLAIM_ALLOWED",
             "AUTH_INSECURE_GLOBAL_ID_RECLAIM", "TOO_FEW_PGS", "POOL_TOO_FEW_PGS", "MGR_MODULE_ERROR"}

def health(health_json):
    h = json.loads(health_json)
    checks = h.get("checks", {})
    bad = [k for k in checks if k not in IGNORABLE]
    desc = "; ".join(k + ": " + v.get("summary", {}).get("message", "") for k, v in checks.items())
    return h.get("status", "?"), bad, desc

cmd, args = sys.argv[1], sys.argv[2:]
if cmd == "ready":
    ok, msg = ceph_ready(sys.stdin.read(), int(args[0]), int(args[1]))
    print(msg)
    sys.exit(0 if ok else 1)
status, bad, desc = health(sys.stdin.read())
print(f"{status} {desc}".strip())
sys.exit(0 if status == "HEALTH_OK" or not bad else 1)
' "$@"
}

ceph_start() {
	local p
	for p in "$CEPH_MON_V2_PORT" "$CEPH_MON_V1_PORT"; do
		port_free "$p" || die "port $p (Ceph mon) is in use; set CEPH_MON_V2_PORT / CEPH_MON_V1_PORT"
	done
	CEPH_CONF="$CEPH_DIR/ceph.conf"
	mkdir -p "$CEPH_DIR"/{log,run,crash,mon-a,mgr-x}
	local fsid mon_addrs
	fsid=$(cat /proc/sys/kernel/random/uuid)
	mon_addrs="[v2:127.0.0.1:$CEPH_MON_V2_PORT,v1:127.0.0.1:$CEPH_MON_V1_PORT]"
	# $cluster, $name and $id below are Ceph's own metavariables.
	cat >"$CEPH_CONF" <<EOF
# Written by cairn bench/$BENCH.sh: a throwaway single-host cluster.
[global]
fsid = $fsid
mon initial members = a
mon host = $mon_addrs
public network = 127.0.0.0/8
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind port min = $CEPH_OSD_PORT_MIN
ms bind port max = $((CEPH_OSD_PORT_MIN + 500))
# No authentication: a local, throwaway benchmark cluster on loopback only.
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = false
keyring = $CEPH_DIR/keyring
run dir = $CEPH_DIR/run
admin socket = $CEPH_DIR/run/\$cluster-\$name.asok
pid file = $CEPH_DIR/run/\$cluster-\$name.pid
log file = $CEPH_DIR/log/\$cluster-\$name.log
crash dir = $CEPH_DIR/crash
mon data = $CEPH_DIR/mon-\$id
mgr data = $CEPH_DIR/mgr-\$id
osd data = $CEPH_DIR/osd-\$id
# One host: the failure domain is the OSD.
osd crush chooseleaf type = 0
osd pool default size = 3
osd pool default min size = 2
osd pool default pg autoscale mode = off
mon allow pool delete = true
# This disk is shared and fuller than the mon's defaults (30% / 5%) like.
mon data avail warn = 2
mon data avail crit = 1
osd objectstore = bluestore
$CEPH_EXTRA_CONF
[client]
# librbd's cache acknowledges writes before they are durable (as Proxmox's
# cache=none, it is off for honest fio rbd figures).
rbd cache = false
EOF
	log "Ceph: fsid $fsid, data in $CEPH_DIR, $NOSDS OSDs, mon $mon_addrs, auth none (loopback only)"
	ceph-authtool --create-keyring "$CEPH_DIR/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
	monmaptool --create --fsid "$fsid" --addv a "$mon_addrs" "$CEPH_DIR/monmap" >/dev/null
	ceph-mon -c "$CEPH_CONF" --mkfs -i a --monmap "$CEPH_DIR/monmap" --keyring "$CEPH_DIR/keyring" \
		>"$CEPH_DIR/log/mkfs-mon.out" 2>&1 || ceph_die "ceph-mon --mkfs failed"
	ceph-mon -c "$CEPH_CONF" -f -i a >"$CEPH_DIR/log/mon.a.out" 2>&1 &
	CEPH_MON_PID=$!
	local deadline=$((SECONDS + 60))
	until ceph_cli mon stat >/dev/null 2>&1; do
		alive "$CEPH_MON_PID" || ceph_die "ceph-mon exited"
		((SECONDS < deadline)) || ceph_die "the Ceph mon did not answer within 60 s"
		sleep 1
	done
	ceph-mgr -c "$CEPH_CONF" -f -i x >"$CEPH_DIR/log/mgr.x.out" 2>&1 &
	CEPH_MGR_PID=$!
	local i uuid id
	for ((i = 0; i < NOSDS; i++)); do
		uuid=$(cat /proc/sys/kernel/random/uuid)
		id=$(ceph_cli osd new "$uuid") || ceph_die "ceph osd new failed"
		[[ $id == "$i" ]] || ceph_die "ceph osd new gave osd.$id, expected osd.$i (a fresh cluster numbers from 0)"
		mkdir -p "$CEPH_DIR/osd-$id"
		ceph-osd -c "$CEPH_CONF" -i "$id" --mkfs --osd-uuid "$uuid" >"$CEPH_DIR/log/mkfs-osd.$id.out" 2>&1 ||
			ceph_die "ceph-osd --mkfs for osd.$id failed"
		ceph-osd -c "$CEPH_CONF" -f -i "$id" >"$CEPH_DIR/log/osd.$id.out" 2>&1 &
		CEPH_OSD_PIDS+=("$!")
	done
	log "Ceph: mon pid $CEPH_MON_PID, mgr pid $CEPH_MGR_PID, osd pids ${CEPH_OSD_PIDS[*]}; waiting for $NOSDS OSDs up and in"
	ceph_wait 120 0
}

# ceph_pool_create POOL PGS APP: a replicated pool of 3 copies for APP
# (rados, rbd).
ceph_pool_create() {
	local setup_log="$CEPH_DIR/log/setup.out"
	{
		ceph_cli osd pool create "$1" "$2" "$2" replicated &&
			ceph_cli osd pool set "$1" size 3 &&
			ceph_cli osd pool set "$1" min_size 2 &&
			ceph_cli osd pool set "$1" pg_autoscale_mode off &&
			ceph_cli osd pool application enable "$1" "$3"
	} >>"$setup_log" 2>&1 || ceph_die "creating pool $1 failed: $(tail -n 3 "$setup_log")"
}

# ceph_wait SECONDS PGS: wait until the OSDs are up and in (and PGS pgs clean).
ceph_wait() {
	local deadline=$((SECONDS + $1)) msg="no answer"
	while :; do
		if msg=$(ceph_cli status -f json 2>/dev/null | ceph_py ready "$NOSDS" "$2"); then
			log "Ceph: $msg"
			return 0
		fi
		((SECONDS < deadline)) || {
			ceph_cli -s >&2 || true
			ceph_die "Ceph not ready after $1 s ($msg)"
		}
		local p
		for p in "${CEPH_OSD_PIDS[@]}"; do
			alive "$p" || ceph_die "ceph-osd pid $p exited"
		done
		sleep 2
	done
}

# ceph_healthy: wait (60 s at most) for HEALTH_OK or an ignorable warning,
# and check that every OSD still runs.
ceph_healthy() {
	local h p deadline=$((SECONDS + 60))
	until h=$(ceph_cli health detail -f json 2>/dev/null | ceph_py health); do
		((SECONDS < deadline)) || {
			ceph_cli -s >&2 || true
			ceph_die "Ceph is not healthy: $h"
		}
		sleep 3
	done
	log "Ceph: $h"
	for p in "${CEPH_OSD_PIDS[@]}"; do
		alive "$p" || ceph_die "ceph-osd pid $p is gone"
	done
}

# ceph_stop: stop the daemons ceph_start started (by pid), OSDs first.
ceph_stop() {
	if [[ -n $CEPH_MON_PID || -n $CEPH_MGR_PID || ${#CEPH_OSD_PIDS[@]} -gt 0 ]]; then
		log "stopping Ceph (osd pids ${CEPH_OSD_PIDS[*]:-none}, mgr $CEPH_MGR_PID, mon $CEPH_MON_PID)"
		((${#CEPH_OSD_PIDS[@]})) && stop_pids 30 "${CEPH_OSD_PIDS[@]}"
		stop_pids 15 "$CEPH_MGR_PID" "$CEPH_MON_PID"
	fi
	CEPH_OSD_PIDS=()
	CEPH_MGR_PID=""
	CEPH_MON_PID=""
}
