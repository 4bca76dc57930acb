#!/usr/bin/env bash
# torchrun-zephon.sh: torchrun on a Zephon mount of this node's ranks. Run it on every node
# where you would run torchrun, with the same arguments:
#
#   torchrun-zephon.sh --nnodes=2 --node_rank=0 --nproc_per_node=4 \
#       --master_addr=node0 --master_port=29500 train.py --epochs 3
#   NNODES=2 NODE_RANK=1 NPROC_PER_NODE=4 torchrun-zephon.sh --master_addr=node0 ... train.py
#
# The mount serves data-parallel (DP) ranks, not processes. Give the job's DP degree D in
# ZEPHON_DP_DEGREE whenever tensor, pipeline or context parallelism is on (their peers
# share a DP rank and read the same batches, e.g. through zephon.torch.ZephonLoader): the
# mount then has world_size D, and node i serves DP ranks i*P .. i*P+P-1 with
# P = ZEPHON_DP_RANKS_PER_NODE (default D / NNODES), as TorchTitan's device mesh (DP
# outermost) places them. Unset, every process is its own DP rank: D = NNODES x
# nproc_per_node and P = nproc_per_node (said on stderr).
#
# It mounts ZEPHON_DATASET for DP ranks NODE_RANK*P .. NODE_RANK*P+P-1 of world_size D
# (torchrun numbers ranks the same way) with the journal
# ZEPHON_JOURNAL_DIR/node-NODE_RANK.sqlite, exports ZEPHON_MOUNT (the mountpoint) to the
# workers (each reads $ZEPHON_MOUNT/rank/$RANK/next), runs torchrun, unmounts when torchrun
# ends (or this script is stopped), and exits with torchrun's status.
#
# Resume: with one node the script computes the resume point from the journals (a set
# ZEPHON_RESUME that differs from it stops the script unless ZEPHON_RESUME_OVERRIDE=1, see
# zephon-node --help). With several, compute it ONCE per job before any node starts, on a
# machine that sees the shared journal directory, and give the same value to every node:
#   ZEPHON_RESUME=$(ZEPHON_JOURNAL_DIR=/shared/journals mountscripts/zephon-node resume-point)
#   export ZEPHON_RESUME
# (each node's mount writes its journal as soon as it starts, so nodes computing it
# themselves could see each other's new layouts). A checkpoint mark that rank 0 wrote to
# $ZEPHON_MOUNT/control after saving the model wins over the slowest rank's progress.
#
# environment: ZEPHON_DATASET, ZEPHON_JOURNAL_DIR, ZEPHON_OPTIONS, ZEPHON_MOUNT (default
#   /tmp/zephon), ZEPHON_RESUME, ZEPHON (see zephon-node --help); ZEPHON_DP_DEGREE,
#   ZEPHON_DP_RANKS_PER_NODE (above; both exported to the workers); NNODES, NODE_RANK,
#   NPROC_PER_NODE when the flags are not given; ZEPHON_TORCHRUN, the torchrun command
#   (default: torchrun, else python3 -m torch.distributed.run).
set -euo pipefail
me=torchrun-zephon.sh
die() { echo "$me: $*" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
node_script=$here/zephon-node
[ -x "$node_script" ] || node_script=$(command -v zephon-node) || die "cannot find zephon-node next to $0 or on PATH"

case "${1:-}" in
-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
"") die "give torchrun's arguments and the training script; see --help" ;;
esac

# torchrun's options before the training script: those without a value are listed here
nnodes= node_rank= nproc= standalone=0
args=("$@")
i=0
while [ $i -lt ${#args[@]} ]; do
	a=${args[$i]}
	case "$a" in
	--) break ;;
	--standalone) standalone=1 ;;
	--module | -m | --no_python | --no-python | --run_path | --run-path) ;;
	--*=*)
		case "${a%%=*}" in
		--nnodes) nnodes=${a#*=} ;;
		--node_rank | --node-rank) node_rank=${a#*=} ;;
		--nproc_per_node | --nproc-per-node) nproc=${a#*=} ;;
		esac ;;
	-*)
		v=${args[$((i + 1))]:-}
		case "$a" in
		--nnodes) nnodes=$v ;;
		--node_rank | --node-rank) node_rank=$v ;;
		--nproc_per_node | --nproc-per-node) nproc=$v ;;
		esac
		i=$((i + 1)) ;;
	*) break ;;                 # the training script: the rest is its own
	esac
	i=$((i + 1))
done

extra=()
if [ $standalone = 1 ]; then
	nnodes=${nnodes:-1} node_rank=${node_rank:-0}
fi
if [ -z "$nnodes" ]; then nnodes=${NNODES:-1}; extra+=(--nnodes="$nnodes"); fi
if [ -z "$node_rank" ]; then node_rank=${NODE_RANK:-0}; extra+=(--node_rank="$node_rank"); fi
if [ -z "$nproc" ]; then
	[ -n "${NPROC_PER_NODE:-}" ] || die "give --nproc_per_node=P (or NPROC_PER_NODE): one rank per worker"
	nproc=$NPROC_PER_NODE; extra+=(--nproc_per_node="$nproc")
fi
[[ $nnodes =~ ^[0-9]+$ ]] || die "--nnodes=$nnodes: a fixed number of nodes, please (an elastic range MIN:MAX cannot keep every rank's mount fixed)"
[[ $nproc =~ ^[0-9]+$ ]] || die "--nproc_per_node=$nproc: give the number of workers per node"
[[ $node_rank =~ ^[0-9]+$ ]] || die "--node_rank=$node_rank is not a number"
# decimal, also with leading zeros ($((08)) would be a bad octal number)
nnodes=$((10#$nnodes)) nproc=$((10#$nproc)) node_rank=$((10#$node_rank))

# DP ranks, not processes (zephon-node dp-ranks says why)
if [ -n "${ZEPHON_DP_DEGREE:-}" ]; then
	dp_per=$("$node_script" dp-ranks "$nnodes" "--nnodes=$nnodes") || exit 2
	read -r dp per <<<"$dp_per"
else
	dp=$((nnodes * nproc)) per=$nproc
	echo "$me: ZEPHON_DP_DEGREE is not set: every process is a data-parallel rank (world_size=$dp); set it when tensor, pipeline or context parallelism is on" >&2
fi
export ZEPHON_DP_DEGREE=$dp ZEPHON_DP_RANKS_PER_NODE=$per
export ZEPHON_NNODES=$nnodes ZEPHON_NODE=$node_rank ZEPHON_RANKS_PER_NODE=$per
if [ "$nnodes" = 1 ]; then
	# the journals' point; a set ZEPHON_RESUME only when it is that point too, or when
	# ZEPHON_RESUME_OVERRIDE=1 says it is meant (e.g. an older checkpoint)
	ZEPHON_RESUME=$("$node_script" resume-point --allow-override)
elif [ -z "${ZEPHON_RESUME:-}" ]; then
	die "ZEPHON_RESUME is not set: with $nnodes nodes compute it once, before any node starts (see --help)"
else
	# not compared with the journals: the other nodes' mounts may be writing them already
	echo "$me: using ZEPHON_RESUME=$ZEPHON_RESUME from the environment" >&2
fi
export ZEPHON_RESUME

if [ -n "${ZEPHON_TORCHRUN:-}" ]; then
	read -ra torchrun <<<"$ZEPHON_TORCHRUN"
elif command -v torchrun >/dev/null 2>&1; then
	torchrun=(torchrun)
else
	torchrun=(python3 -m torch.distributed.run)
fi

# Debian 12's python3-torch 1.13 on Python 3.11: torchrun's Std.from_str("0") returns None
# (iterating an IntFlag skips the zero member since Python 3.11), so torchrun dies with
# "AttributeError: 'NoneType' object has no attribute 'get'" in to_map() unless --redirects
# and --tee are 1 or 2. There, unless you chose them, add --redirects=2 --tee=2 (workers'
# stderr goes to torchrun's log directory and is copied to the console).
std_bug() {
	local py=${torchrun[0]}
	if [ "${torchrun[1]:-}" != -m ]; then      # the torchrun script: its interpreter
		py=$(head -1 "$(command -v "$py")" | sed -n 's/^#! *\([^ ]*\).*/\1/p')
		[ -n "$py" ] || return 1
	fi
	"$py" - <<'PYEOF' 2>/dev/null
import importlib.util, os, sys
spec = importlib.util.find_spec('torch')
api = os.path.join(os.path.dirname(spec.origin), 'distributed', 'elastic', 'multiprocessing', 'api.py')
sys.exit(0 if sys.version_info >= (3, 11) and 'for s in Std:' in open(api).read() else 1)
PYEOF
}
case " $* " in
*" --redirects"* | *" -r "* | *" --tee"* | *" -t "*) ;;
*)
	if std_bug; then
		echo "$me: this torch's torchrun needs --redirects and --tee on Python 3.11; adding --redirects=2 --tee=2" >&2
		extra+=(--redirects=2 --tee=2)
	fi ;;
esac

# Unmount only what this script mounted: when the mount fails (e.g. another job's mount
# is live at the same ZEPHON_MOUNT) the mountpoint is not ours to touch.
child= mounted=0 stop=
cleanup() {
	trap - EXIT INT TERM
	if [ -n "$child" ] && kill -0 "$child" 2>/dev/null; then
		kill -TERM "$child" 2>/dev/null || true
		wait "$child" 2>/dev/null || true
	fi
	[ "$mounted" = 0 ] || "$node_script" umount || true
}
trap cleanup EXIT
# bash runs a trap only once the mount command has returned: remember the signal until
# `mounted` says whether there is something to unmount
trap 'stop=143' TERM
trap 'stop=130' INT

# on failure, set -e exits: nothing of ours is mounted; a live mount of this very
# stream and layout (left by a crashed run) is reused, and not ours to unmount at the end
how=$("$node_script" mount)
[ "$how" = reused ] || mounted=1
trap 'exit 143' TERM
trap 'exit 130' INT
[ -z "$stop" ] || exit "$stop"
ZEPHON_MOUNT=$("$node_script" path)
export ZEPHON_MOUNT
echo "$me: node $node_rank of $nnodes: ranks $((node_rank * per))-$((node_rank * per + per - 1)) at $ZEPHON_MOUNT (data-parallel degree $dp), resume=$ZEPHON_RESUME" >&2

# in the background, so that a TERM reaches the trap (and torchrun) at once
"${torchrun[@]}" "${extra[@]}" "$@" &
child=$!
set +e
wait "$child"
status=$?
set -e
child=
exit $status
