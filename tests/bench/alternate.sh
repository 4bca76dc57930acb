#!/usr/bin/env bash
# Compare zephon builds or mount options by mounting each variant at once and running the
# same readloop on each in turn, ROUNDS times (a noisy minute then falls on all of them).
# Not part of tests/bench/run: the comparisons of RESULTS.md, "Offload threads".
#
# usage: tests/bench/alternate.sh SCENARIO ROUNDS NAME=ZEPHON[:OPTS] ...
#   SCENARIO  flat   4 ranks read 1 MiB token batches flat out (B4's mount: ds-tokens-raw,
#                    world_size=4, global_batch=1024, micro_batch=256, format=bin)
#             paced  the same, each rank pausing 20 ms between batches
#             steps  paced trainers on B2's compressed JSONL (world_size=4,
#                    global_batch=32768, micro_batch=64, format=lines) while two loops
#                    `cat` successive step/<t> files of ranks 0 and 1
#   ZEPHON    a zephon binary; OPTS are added to the mount options (",max_threads=2")
# example: tests/bench/alternate.sh flat 4 old=/tmp/old/build/fs/zephon:,max_threads=64 \
#              new=build-bench/fs/zephon
# Datasets come from a tests/bench/run (in $ZEPHON_BENCH_DIR, default /tmp/zephon-bench).
set -euo pipefail
cd "$(dirname "$0")/../.."
scenario=$1 rounds=$2
shift 2
bench=${ZEPHON_BENCH_DIR:-/tmp/zephon-bench}
work=$(mktemp -d /tmp/zephon-alternate.XXXXXX)
readloop=build-bench/tests/readloop
[ -x $readloop ] || { echo "build build-bench first (tests/bench/run)" >&2; exit 1; }
case $scenario in
flat|paced)
	ds=$bench/ds-tokens-raw
	opts=world_size=4,global_batch=1024,micro_batch=256,format=bin ;;
steps)
	ds=$bench/ds-jsonl-compressed
	opts=world_size=4,global_batch=32768,micro_batch=64,format=lines ;;
*)
	echo "unknown scenario $scenario (flat, paced, steps)" >&2; exit 2 ;;
esac
[ -d "$ds" ] || { echo "no dataset $ds: run tests/bench/run once" >&2; exit 1; }

names=()
cleanup() {
	for n in "${names[@]}"; do
		fusermount3 -u "$work/mnt-$n" 2>/dev/null || fusermount3 -uz "$work/mnt-$n" 2>/dev/null || true
	done
	wait
	rm -rf "$work"
}
trap cleanup EXIT
for spec in "$@"; do
	name=${spec%%=*} rest=${spec#*=}
	bin=${rest%%:*} extra=
	[ "$rest" != "$bin" ] && extra=${rest#*:}
	mkdir -p "$work/mnt-$name"
	"$bin" mount "$ds" "$work/mnt-$name" -f -o "$opts,journal=$work/j-$name.sqlite$extra" \
		2>"$work/log-$name" &
	for _ in $(seq 100); do [ -e "$work/mnt-$name/status" ] && break; sleep 0.1; done
	[ -e "$work/mnt-$name/status" ] || { cat "$work/log-$name" >&2; exit 1; }
	names+=("$name")
done

summary='import json, sys; d = json.load(sys.stdin)
print("%5.2f GB/s  opens %5d  first byte p50 %5.0f us  p99 %6.0f us" % (
    d["bytes_per_s"] / 1e9, d["opens"], d["first_p50_us"], d["first_p99_us"]))'
for round in $(seq "$rounds"); do
	for n in "${names[@]}"; do
		m=$work/mnt-$n
		loops=()
		if [ "$scenario" = steps ]; then
			for r in 0 1; do
				( for k in $(seq 0 400); do
					cat "$m/rank/$r/step/$((round * 1000 + r * 500 + k))" >/dev/null || break
				  done ) &
				loops+=($!)
			done
			sleep 0.3
		fi
		args=(-e 1048576)
		[ "$scenario" = steps ] && args=()    # lines batches vary in size
		[ "$scenario" = flat ] || args+=(-p 20000)
		printf '%-6s round %d  %-10s ' "$scenario" "$round" "$n"
		$readloop -b 1M -t $([ "$scenario" = steps ] && echo 5 || echo 3) -w 1 -f 4096 \
			"${args[@]}" "$m"/rank/{0..3}/next | /usr/bin/python3 -c "$summary"
		for p in "${loops[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	done
done
