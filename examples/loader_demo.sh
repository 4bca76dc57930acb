#!/usr/bin/env bash
# ZephonLoader end to end on one machine (CPU, gloo): examples/train_loader.py under
# torchrun, killed with kill -9 and resumed at another data-parallel degree.
#
#   examples/loader_demo.sh [WORKDIR]     (default: a new temporary directory, kept)
#
# A: 2 processes train steps 0-11 uninterrupted. B: 2 processes, checkpoints every 4
# steps, a second each, killed (kill -9, every process of the job) once step 9 is logged
# (before its step-12 checkpoint); no mount is
# left behind. C: B resumed with 3 processes from its step-8 checkpoint. The losses of
# steps 8-11 of A and C must agree (the same samples in every step; another DP degree
# only sums in another order). Environment: ZEPHON (the zephon executable, default:
# zephon on PATH, else build/fs/zephon), PYTHON (a python with torch and the zephon
# package, default python3).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${1:-$(mktemp -d "${TMPDIR:-/tmp}/zephon-loader-demo.XXXXXX")}
mkdir -p "$work"
work=$(cd "$work" && pwd)
zephon=${ZEPHON:-$(command -v zephon || echo "$here/../build/fs/zephon")}
python=${PYTHON:-python3}
export ZEPHON=$zephon OMP_NUM_THREADS=1
echo "== work directory: $work" >&2

# random tokens below 512, windows of 33 overlapping by one (32 inputs, 32 labels)
"$python" -c 'import sys, numpy as np; np.random.default_rng(0).integers(0, 512, 1 << 15, dtype=np.uint16).tofile(sys.argv[1])' "$work/tokens.bin"
"$zephon" pack --format tokens --dtype uint16 --seq-len 32 --overlap 1 "$work/tokens.bin" -o "$work/ds" >/dev/null

train() { # processes work-subdirectory [more arguments of train_loader.py]
	"$python" -m torch.distributed.run --standalone --nproc_per_node="$1" \
		--monitor_interval=0.2 "$here/train_loader.py" --data "$work/ds" --work "$work/$2" \
		--steps 12 --save-every 4 --global-batch 12 --micro-batch 2 "${@:3}"
}

echo "== A: 2 processes, steps 0-11" >&2
train 2 a >"$work/a.log" 2>&1 || { tail -30 "$work/a.log" >&2; exit 1; }

echo "== B: 2 processes, kill -9 once step 9 is logged" >&2
bash -c "$(declare -f train); python=$python here=$here work=$work; train 2 b --step-seconds 1" \
	>"$work/b.log" 2>&1 &
job=$!
for _ in $(seq 600); do
	grep -q '^step 9 ' "$work/b.log" && break
	kill -0 "$job" 2>/dev/null || { tail -30 "$work/b.log" >&2; echo "B ended early" >&2; exit 1; }
	sleep 0.2
done
grep -q '^step 9 ' "$work/b.log" || { echo "B logged no step 9 within 120 s" >&2; exit 1; }
# the job: torchrun and its workers (this torch starts them in sessions of their own),
# not the mount's daemon (local rank 0's child): it is to see its processes go, and stop
zexe=$(realpath "$zephon")
tree() {
	local c
	[ "$(readlink /proc/"$1"/exe 2>/dev/null)" = "$zexe" ] || echo "$1"
	for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do tree "$c"; done
}
mapfile -t pids < <(tree "$job")
kill -STOP "${pids[@]}" 2>/dev/null || true     # none may start another meanwhile
kill -9 "${pids[@]}" 2>/dev/null || true
wait "$job" 2>/dev/null || true
for _ in $(seq 100); do          # the mount goes with the last of its processes
	grep -qF " $work/b/mnt " /proc/self/mountinfo || break
	sleep 0.1
done
if grep -qF " $work/b/mnt " /proc/self/mountinfo; then
	echo "the mount of the killed job is still there" >&2
	exit 1
fi
echo "B killed after step 9; checkpoints: $(ls "$work/b/ckpt" | tr '\n' ' ')" >&2

echo "== C: B resumed with 3 processes" >&2
train 3 b >"$work/c.log" 2>&1 || { tail -30 "$work/c.log" >&2; exit 1; }
grep '^resumed' "$work/c.log" >&2

echo "step  loss(A, 2 processes)  loss(C, resumed at 3)"
join <(sed -n 's/^step \([0-9]*\) loss \(.*\)/\1 \2/p' "$work/a.log" | sort -k1,1) \
     <(sed -n 's/^step \([0-9]*\) loss \(.*\)/\1 \2/p' "$work/c.log" | sort -k1,1) |
	sort -n | tee "$work/compare.txt"
awk '{ d = ($2 > $3 ? $2 - $3 : $3 - $2) / $2; if (d > m) m = d; n++ }
     END { printf "steps compared %d, max relative difference %.3g\n", n, m
           exit !(n == 4 && m <= 1e-5) }' "$work/compare.txt"
