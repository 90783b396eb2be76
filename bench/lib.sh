# Shared by the bench scripts: `. "$REPO/bench/lib.sh"` after setting
# BENCH to the script's name. log prints a timestamped line to stderr; die
# prints an error and exits.
log() { printf '%s [%s] %s\n' "$(date +%H:%M:%S)" "$BENCH" "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}
