#!/usr/bin/env bash
# TorchTitan's trainer (python -m torchtitan.train) on a Zephon mount, with
# examples/torchtitan_config.py: pack random tokens, mount at DP 2 with a validation
# split, train 10 steps with a checkpoint at step 5, then resume at DP 1 from it.
#
#   examples/torchtitan_demo.sh [--dry-run] [WORKDIR]   (default: a new temporary directory)
#
# TorchTitan's trainer needs CUDA GPUs (2 here). --dry-run needs none: it builds the
# trainer's config from the same command line (TorchTitan's ConfigManager) and, as the
# trainer does, the training and validation loaders of every DP rank, reads a batch of
# each, and stops. Environment: ZEPHON (the zephon executable, default: zephon on PATH,
# else build/fs/zephon), PYTHON (a python with torch, torchtitan 0.3.0 and the zephon
# package, default python3).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dry=0
if [ "${1:-}" = --dry-run ]; then dry=1; shift; fi
work=${1:-$(mktemp -d "${TMPDIR:-/tmp}/zephon-titan-demo.XXXXXX")}
mkdir -p "$work"
work=$(cd "$work" && pwd)
zephon=${ZEPHON:-$(command -v zephon || echo "$here/../build/fs/zephon")}
python=${PYTHON:-python3}
export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH} ZEPHON=$zephon
SEQ=64 GBS=8
echo "== work directory: $work" >&2

# token ids below the debug model's vocabulary of 2048, windows of SEQ + 1
"$python" -c 'import sys, numpy as np; np.random.default_rng(0).integers(0, 2048, 1 << 17, dtype=np.uint16).tofile(sys.argv[1])' "$work/tokens.bin"
"$zephon" pack --format tokens --dtype uint16 --seq-len $SEQ --overlap 1 "$work/tokens.bin" -o "$work/ds" >/dev/null

mnt=$work/mnt
mkdir -p "$mnt"
trap 'fusermount3 -u "$mnt" 2>/dev/null || true' EXIT
remount() { # DP degree
	fusermount3 -u "$mnt" 2>/dev/null || true
	"$zephon" mount "$work/ds" "$mnt" -o "world_size=$1,global_batch=$GBS,seed=1,validation=0.05,journal=$work/journal.sqlite"
}
args() { # DP-degree steps
	echo --module torchtitan_config --config llama3_debug_zephon \
		--training.seq_len $SEQ --training.local_batch_size $((GBS / $1)) \
		--training.global_batch_size $GBS --training.steps "$2" \
		--parallelism.data_parallel_shard_degree "$1" \
		--checkpoint.enable --checkpoint.interval 5 --checkpoint.folder checkpoint \
		--dump_folder "$work/out"
}

if [ $dry = 1 ]; then
	for dp in 2 1; do
		remount $dp
		# shellcheck disable=SC2046
		ZEPHON_MOUNT=$mnt "$python" - "$dp" $(args "$dp" 10) <<'PYEOF'
import sys
from torchtitan.config import ConfigManager
dp = int(sys.argv[1])
c = ConfigManager().parse_args(sys.argv[2:])
tok = c.tokenizer.build(tokenizer_path=c.hf_assets_path)     # as the trainer does
kw = dict(dp_world_size=dp, tokenizer=tok, seq_len=c.training.seq_len,
          local_batch_size=c.training.local_batch_size)
for r in range(dp):
    train = c.dataloader.build(dp_rank=r, **kw)
    inputs, labels = next(iter(train))
    val = c.validator.dataloader.build(dp_rank=r, **kw)
    vin, vlab = next(iter(val))
    print('DP %d rank %d: train %s, validation %s, %d tokens of vocabulary %d' % (
        dp, r, tuple(labels.shape), tuple(vlab.shape), labels.numel(), tok.get_vocab_size()))
PYEOF
	done
	echo "dry run passed" >&2
	exit 0
fi

remount 2
# shellcheck disable=SC2046
ZEPHON_MOUNT=$mnt "$python" -m torch.distributed.run --standalone --nproc_per_node=2 \
	-m torchtitan.train $(args 2 5)
remount 1          # another DP degree: the checkpoint positions the stream
# shellcheck disable=SC2046
ZEPHON_MOUNT=$mnt "$python" -m torch.distributed.run --standalone --nproc_per_node=1 \
	-m torchtitan.train $(args 1 10)
echo "trained to step 10; checkpoints in $work/out/checkpoint" >&2
