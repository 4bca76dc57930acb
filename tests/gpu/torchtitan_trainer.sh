#!/usr/bin/env bash
# TorchTitan's own trainer (python -m torchtitan.train) with the Zephon data loader, on GPUs:
# the Llama 3 debug model (zephon.recipes.llama3_debugmodel_zephon), a few dozen steps,
# checkpoint, kill -9 of the job and the mount, resume at another DP degree, losses compared.
#
#   tests/gpu/torchtitan_trainer.sh [--dry-run] [WORKDIR]
#
#   WORKDIR    where the dataset, mounts, journals, checkpoints and logs go (default: a new
#              temp dir); kept at the end
#   --dry-run  no GPU needed: pack, mount, build the trainer's config exactly as the runs
#              below do (TorchTitan's ConfigManager on the same command line) and build the
#              data loader for every DP rank of both degrees, as the trainer builds it, and
#              read two batches of each; then stop
#
# Environment: ZEPHON (the zephon executable, default build/fs/zephon), PYTHON (a python with
# torch and TorchTitan: 0.3.0, default .venv/bin/python, else /work/venv/bin/python; or
# TorchTitan's git main, e.g. PYTHON=.venv-titan-main/bin/python: the trainer's options are
# each version's, zephon.torchtitan.CONTRACT says which),
# ZEPHON_DATA (../shared/data: its tinyshakespeare.txt and cc_en_head-0091.jsonl, packed with
# TorchTitan's own test tokenizer, tokenizer/torchtitan-test, the debug model's: vocabulary
# 2048, BOS/EOS around each document), STEPS (30), SEQ (256).
#
# The runs: with N >= 2 GPUs, run A trains DP N for STEPS steps; run B trains DP N with a
# checkpoint at step 10 and is killed (-9, job and mount) once step 13 is logged; run C
# mounts at DP N/2 and resumes from the step-10 checkpoint to STEPS. Global batch 8 x N
# throughout (C: local_batch_size 16). With 1 GPU the DP degree cannot change: run C uses
# local_batch_size 4 with gradient accumulation 2 (global batch 8, another micro-batch).
# Losses of steps 11..STEPS of run C must equal run A's within 1e-3 relative (TorchTitan's
# deterministic mode; another DP degree reduces in another order, so not bit-exact).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dry=0
if [ "${1:-}" = --dry-run ]; then dry=1; shift; fi
work=${1:-$(mktemp -d /tmp/zephon-titan.XXXXXX)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
export ZEPHON=${ZEPHON:-$root/build/fs/zephon}
PYTHON=${PYTHON:-$root/.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=/work/venv/bin/python
data=${ZEPHON_DATA:-$root/../shared/data}
STEPS=${STEPS:-30}
SEQ=${SEQ:-256}
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
log() { echo "== $*" >&2; }

if [ $dry = 1 ]; then
	ngpu=${NGPU:-2}
else
	ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
	if [ "$ngpu" -lt 1 ]; then
		echo "torchtitan_trainer.sh: no GPU found (nvidia-smi -L); run with --dry-run to check everything else" >&2
		exit 2
	fi
fi
if [ "$ngpu" -ge 2 ]; then
	dp_a=$ngpu; dp_c=$((ngpu / 2)); lbs_a=8; lbs_c=16; gbs=$((8 * ngpu))
else
	dp_a=1; dp_c=1; lbs_a=8; lbs_c=4; gbs=8
fi
log "GPUs $ngpu: run A/B at DP $dp_a (local batch $lbs_a), run C at DP $dp_c (local batch $lbs_c), global batch $gbs"

# the dataset: raw text tokenized at pack time with the debug model's tokenizer (ids below
# its vocabulary of 2048), windows of SEQ + 1 overlapping by one
ds=$work/ds
if [ ! -d "$ds" ]; then
	ZEPHON_PYTHON=$PYTHON "$ZEPHON" pack -q --tokenizer "$data/tokenizer/torchtitan-test" \
		--seq-len "$SEQ" --overlap 1 --compress none \
		"$data/text/tinyshakespeare.txt" "$data/jsonl/cc_en_head-0091.jsonl" -o "$ds"
fi

mounts=()
mount_pid=
mount_at() { # mountpoint journal dp [more options]; sets mount_pid (the daemon, -f)
	local mp=$1 j=$2 dp=$3 deadline=$((SECONDS + 60)); shift 3
	mkdir -p "$mp"
	"$ZEPHON" mount "$ds" "$mp" -f -o "world_size=$dp,global_batch=$gbs,seed=1,journal=$j${1:+,$1}" \
		2>>"$work/mounts.log" &
	mount_pid=$!
	mounts+=("$mp")
	until [ -r "$mp/status" ] && grep -q '"world_size": *'"$dp" "$mp/status" 2>/dev/null; do
		kill -0 "$mount_pid" 2>/dev/null || { tail -5 "$work/mounts.log" >&2; exit 1; }
		[ $SECONDS -lt $deadline ] || { echo "the mount at $mp did not answer in 60 s" >&2; exit 1; }
		sleep 0.1
	done
}
unmount() { fusermount3 -u "$1" 2>/dev/null || fusermount3 -uz "$1" 2>/dev/null || true; }
cleanup() { for mp in "${mounts[@]}"; do unmount "$mp"; done; wait; }
trap cleanup EXIT

contract=$("$PYTHON" -c 'import zephon.torchtitan as t; print(t.CONTRACT)' 2>/dev/null) ||
	{ echo "torchtitan_trainer.sh: $PYTHON cannot import zephon.torchtitan" >&2; exit 1; }
log "TorchTitan contract: $contract"
sizes() { # local_batch: the trainer's batch sizes in this TorchTitan's options
	if [ "$contract" = data.loader ]; then   # main: tokens per micro-batch and per step
		echo --training.max_context_length "$SEQ" \
			--training.num_tokens_per_microbatch_per_dp_rank $(($1 * SEQ)) \
			--training.num_tokens_per_train_step $((gbs * SEQ))
	else                                      # 0.3.0: samples
		echo --training.seq_len "$SEQ" --training.local_batch_size "$1" \
			--training.global_batch_size "$gbs"
	fi
}
args() { # dp local_batch dump_folder
	echo --module zephon.recipes --config llama3_debugmodel_zephon \
		$(sizes "$2") --training.steps "$STEPS" \
		--parallelism.data_parallel_shard_degree "$1" \
		--checkpoint.enable --checkpoint.interval 10 --checkpoint.folder checkpoint \
		--debug.deterministic --debug.seed 42 --metrics.log_freq 1 \
		--dump_folder "$3"
}

if [ $dry = 1 ]; then
	for dp in "$dp_a" "$dp_c"; do
		lbs=$lbs_a; [ "$dp" = "$dp_c" ] && lbs=$lbs_c
		mp=$work/mnt-dry-$dp
		mount_at "$mp" "$work/dry-$dp.sqlite" "$dp"
		log "dry run: trainer config and data loader at DP $dp"
		# shellcheck disable=SC2046
		ZEPHON_MOUNT=$mp "$PYTHON" - "$dp" $(args "$dp" "$lbs" "$work/dry-out") <<'EOF'
import sys
from torchtitan.config import ConfigManager
from zephon.torchtitan import CONTRACT, ZephonDataLoader
dp = int(sys.argv[1])
c = ConfigManager().parse_args(sys.argv[2:])
assert isinstance(c.dataloader, ZephonDataLoader.Config), c.dataloader
assert c.checkpoint.enable and c.checkpoint.interval == 10
tok = c.tokenizer.build(tokenizer_path=c.hf_assets_path)   # as the trainer does
t = c.training
if CONTRACT == 'data.loader':    # as main's trainer.py builds the loader: 1-D batches
    kw = dict(max_context_length=t.max_context_length,
              num_tokens_per_batch=t.num_tokens_per_microbatch_per_dp_rank)
    shape = (t.num_tokens_per_microbatch_per_dp_rank,)
else:                            # as 0.3.0's: [local_batch_size, seq_len]
    kw = dict(seq_len=t.seq_len, local_batch_size=t.local_batch_size,
              snapshot_every_n_steps=c.checkpoint.interval)
    shape = (t.local_batch_size, t.seq_len)
for r in range(dp):
    dl = c.dataloader.build(dp_world_size=dp, dp_rank=r, tokenizer=tok, **kw)
    it = iter(dl)
    for _ in range(2):
        inp, labels = next(it)
        assert inp['input'].shape == inp['positions'].shape == labels.shape == shape
        assert int(inp['input'].max()) < tok.get_vocab_size()
    print('dp_rank %d of %d: %s batches of %s, state %s' % (
        r, dp, str(labels.dtype).replace('torch.', ''), tuple(labels.shape),
        dl.state_dict()['consumed_samples']))
EOF
		unmount "$mp"
	done
	log "dry run passed (no GPU used): $work"
	exit 0
fi

train() { # dp local_batch dump mount log; in the background, its pid in $!
	local dp=$1 lbs=$2 dump=$3 mp=$4 out=$5
	# shellcheck disable=SC2046
	ZEPHON_MOUNT=$mp setsid "$PYTHON" -m torch.distributed.run --standalone \
		--nproc_per_node="$dp" --local-ranks-filter 0 -m torchtitan.train \
		$(args "$dp" "$lbs" "$dump") >"$out" 2>&1 &
}
losses() { # log -> "step loss" lines (TorchTitan's metrics line: "step: N  loss: X ...")
	sed 's/\x1b\[[0-9;]*m//g' "$1" | sed -n 's/.*step: *\([0-9]*\).*loss: *\([0-9.e+-]*\).*/\1 \2/p'
}

log "run A: DP $dp_a, $STEPS steps, uninterrupted"
mount_at "$work/mnt-a" "$work/a.sqlite" "$dp_a"
train "$dp_a" "$lbs_a" "$work/out-a" "$work/mnt-a" "$work/a.log"; pid=$!
wait "$pid" || { tail -50 "$work/a.log"; exit 1; }
unmount "$work/mnt-a"

log "run B: DP $dp_a, checkpoint at step 10, kill -9 after step 13"
mount_at "$work/mnt-b" "$work/b.sqlite" "$dp_a"
train "$dp_a" "$lbs_a" "$work/out-b" "$work/mnt-b" "$work/b.log"; pid=$!
deadline=$((SECONDS + 900))
until losses "$work/b.log" | awk '$1 >= 13 {f=1} END {exit !f}'; do
	kill -0 "$pid" 2>/dev/null || { tail -50 "$work/b.log"; echo "run B ended early" >&2; exit 1; }
	[ $SECONDS -lt $deadline ] || { echo "run B: no step 13 within 900 s" >&2; exit 1; }
	sleep 1
done
kill -9 -- -"$pid" 2>/dev/null || kill -9 "$pid"
kill -9 "$mount_pid"
unmount "$work/mnt-b"
[ -d "$work/out-b/checkpoint/step-10" ] || { echo "run B left no step-10 checkpoint" >&2; exit 1; }

log "run C: DP $dp_c (local batch $lbs_c) from the step-10 checkpoint, to step $STEPS"
mount_at "$work/mnt-c" "$work/b.sqlite" "$dp_c" resume=fresh
train "$dp_c" "$lbs_c" "$work/out-b" "$work/mnt-c" "$work/c.log"; pid=$!
wait "$pid" || { tail -50 "$work/c.log"; exit 1; }
unmount "$work/mnt-c"

losses "$work/a.log" >"$work/a.losses"
losses "$work/c.log" >"$work/c.losses"
echo "step  loss(A, uninterrupted)  loss(C, resumed at DP $dp_c)"
join "$work/a.losses" "$work/c.losses" | tee "$work/compare.txt"
awk -v steps="$STEPS" '
	{ d = ($2 > $3 ? $2 - $3 : $3 - $2) / $2; if (d > m) m = d; n++ }
	END { printf "steps compared %d, max relative difference %.3g\n", n, m
	      exit !(n == steps - 10 && m <= 1e-3) }' "$work/compare.txt"
