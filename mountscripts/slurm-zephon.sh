#!/usr/bin/env bash
#SBATCH --job-name=zephon
# slurm-zephon.sh: run a SLURM job step on Zephon mounts, one mount per node.
#
# usage (as the batch script, or called from yours):
#   sbatch --nodes=2 --ntasks-per-node=4 --gpus-per-node=4 slurm-zephon.sh srun python train.py
#   slurm-zephon.sh COMMAND...      inside an allocation (sbatch, salloc)
#
# What it does, in the batch step:
#   1. the resume point, once, over every node's journal in ZEPHON_JOURNAL_DIR
#      (`zephon journal resume-point`; samples:0@0 on the first run);
#   2. `srun --overlap --ntasks-per-node=1 slurm-zephon.sh node` in the background: on each
#      node one foreground mount of that node's data-parallel (DP) ranks (node N serves
#      N*P .. N*P+P-1 of world_size D), its own journal ZEPHON_JOURNAL_DIR/node-N.sqlite,
#      and resume=samples:G@S, the same on every node;
#   3. waits until every node's mount answers, runs COMMAND (usually `srun python train.py`:
#      with one DP rank per task each task reads $ZEPHON_MOUNT/rank/$SLURM_PROCID/next),
#      and exits with its status;
#   4. unmounts every node, also when COMMAND fails or the job is cancelled.
# The mount step has to stay a job step of its own: SLURM ends every process of a step
# when the step ends, so a mount that daemonized from a short step would die with it.
#
# The mount serves DP ranks, not tasks. Give the job's DP degree D in ZEPHON_DP_DEGREE
# whenever tensor, pipeline or context parallelism is on (their peers share a DP rank and
# read the same batches, e.g. through zephon.torch.ZephonLoader with the DP mesh's rank):
# node N then serves DP ranks N*P .. N*P+P-1 with P = ZEPHON_DP_RANKS_PER_NODE (default
# D / nodes), as TorchTitan's device mesh (DP outermost) places them. Unset, every task
# is its own DP rank: P = ZEPHON_RANKS_PER_NODE (below) and D = nodes x P (said on
# stderr). COMMAND gets ZEPHON_DP_DEGREE and ZEPHON_DP_RANKS_PER_NODE either way.
#
# environment (see zephon-node --help): ZEPHON_DATASET, ZEPHON_JOURNAL_DIR (shared),
#   ZEPHON_OPTIONS (global_batch=...,micro_batch=...,seed=...), ZEPHON_MOUNT (node-local,
#   default /tmp/zephon-$SLURM_JOB_ID), ZEPHON_DP_DEGREE and ZEPHON_DP_RANKS_PER_NODE
#   (above), ZEPHON_RANKS_PER_NODE (without ZEPHON_DP_DEGREE: the DP ranks per node;
#   default the job's --ntasks-per-node, else the GPUs on the node, else tasks / nodes;
#   with it, it must be P if set), ZEPHON_RESUME
#   (default: computed in step 1; a set one must equal that point, else the job stops,
#   unless ZEPHON_RESUME_OVERRIDE=1: sbatch passes on a value left in the submitting
#   shell), ZEPHON (the executable).
# Per-node subcommands (what srun runs on each node; SLURM_NODEID picks the node):
#   slurm-zephon.sh node | wait | umount      and   slurm-zephon.sh resume-point
set -euo pipefail

# sbatch runs a copy of this script from the spool directory: find zephon-node through
# ZEPHON_SCRIPTS, PATH, or the directory the job was submitted from.
find_node_script() {
	local d
	for d in "${ZEPHON_SCRIPTS:-}" "$(dirname "${BASH_SOURCE[0]}")" \
		"${SLURM_SUBMIT_DIR:-.}/mountscripts" "${SLURM_SUBMIT_DIR:-.}"; do
		[ -n "$d" ] && [ -x "$d/zephon-node" ] && { echo "$(cd "$d" && pwd)/zephon-node"; return; }
	done
	command -v zephon-node || {
		echo "slurm-zephon.sh: cannot find zephon-node; set ZEPHON_SCRIPTS to the mountscripts directory" >&2
		exit 1
	}
}
node_script=$(find_node_script)
self=$(cd "$(dirname "$node_script")" && pwd)/slurm-zephon.sh
[ -x "$self" ] || self=$(realpath "${BASH_SOURCE[0]}")

# The node variables from SLURM's. Ranks per node come from the batch step's view: inside
# the mount step (one task per node) SLURM_NTASKS_PER_NODE would say 1.
export ZEPHON_NNODES=${ZEPHON_NNODES:-${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-}}}
given_per_node=${ZEPHON_RANKS_PER_NODE:-}
if [ -z "${ZEPHON_RANKS_PER_NODE:-}" ]; then
	if [ -n "${SLURM_NTASKS_PER_NODE:-}" ]; then
		ZEPHON_RANKS_PER_NODE=${SLURM_NTASKS_PER_NODE%%[(,]*}    # "4", "4(x2)", "4,4"
	elif [ -n "${SLURM_GPUS_ON_NODE:-}" ]; then
		ZEPHON_RANKS_PER_NODE=$SLURM_GPUS_ON_NODE
	elif [[ ${SLURM_NTASKS:-} =~ ^[0-9]+$ && $ZEPHON_NNODES =~ ^[0-9]*[1-9][0-9]*$ ]]; then
		ZEPHON_RANKS_PER_NODE=$((10#$SLURM_NTASKS / 10#$ZEPHON_NNODES))    # 10#: 08 is not octal
	fi
fi
export ZEPHON_RANKS_PER_NODE
export ZEPHON_MOUNT=${ZEPHON_MOUNT:-/tmp/zephon-${SLURM_JOB_ID:-job}}

case "${1:-}" in
node | wait | umount | options | path)
	# a task of a per-node step: SLURM_NODEID is this node (the batch step's value, 0,
	# must not leak into the other nodes' tasks, so it is never exported before srun)
	[ -n "${SLURM_NODEID:-}" ] || { echo "slurm-zephon.sh $1: SLURM_NODEID is not set (run it with srun)" >&2; exit 2; }
	export ZEPHON_NODE=$SLURM_NODEID
	if [ "$1" = node ]; then exec "$node_script" mount -f; fi
	exec "$node_script" "$1" ;;
resume-point) exec "$node_script" resume-point ;;
-h | --help) sed -n '3,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
"") echo "slurm-zephon.sh: give the command to run, e.g. srun python train.py; see --help" >&2; exit 2 ;;
esac

[ -n "$ZEPHON_NNODES" ] || { echo "slurm-zephon.sh: not inside a SLURM allocation (SLURM_JOB_NUM_NODES is not set)" >&2; exit 2; }
die() { echo "slurm-zephon.sh: $*" >&2; exit 2; }
[[ $ZEPHON_NNODES =~ ^[0-9]{1,9}$ ]] && [ $((10#$ZEPHON_NNODES)) -ge 1 ] ||
	die "SLURM_JOB_NUM_NODES=$ZEPHON_NNODES is not a number of nodes"
nodes=$((10#$ZEPHON_NNODES))
# DP ranks, not tasks (zephon-node dp-ranks says why)
if [ -n "${ZEPHON_DP_DEGREE:-}" ]; then
	dp_per=$("$node_script" dp-ranks "$nodes" "the job's $nodes nodes") || exit 2
	read -r dp per <<<"$dp_per"
	[ -z "$given_per_node" ] || [ "$((10#$given_per_node))" = "$per" ] ||
		die "ZEPHON_RANKS_PER_NODE=$given_per_node contradicts ZEPHON_DP_DEGREE=$dp ($per DP ranks per node); unset it"
	ZEPHON_RANKS_PER_NODE=$per
else
	[ -n "${ZEPHON_RANKS_PER_NODE:-}" ] || die "cannot tell the ranks per node; give sbatch --ntasks-per-node or set ZEPHON_RANKS_PER_NODE (or ZEPHON_DP_DEGREE)"
	[[ $ZEPHON_RANKS_PER_NODE =~ ^[0-9]{1,9}$ ]] || die "ZEPHON_RANKS_PER_NODE=$ZEPHON_RANKS_PER_NODE is not a number"
	per=$((10#$ZEPHON_RANKS_PER_NODE)) dp=$((nodes * 10#$ZEPHON_RANKS_PER_NODE))
	echo "slurm-zephon.sh: ZEPHON_DP_DEGREE is not set: every task is a data-parallel rank (world_size=$dp); set it when tensor, pipeline or context parallelism is on" >&2
fi
export ZEPHON_RANKS_PER_NODE=$per ZEPHON_DP_DEGREE=$dp ZEPHON_DP_RANKS_PER_NODE=$per

# one task on every node, sharing the allocation with the job's other steps
per_node=(srun --overlap --nodes="$ZEPHON_NNODES" --ntasks="$ZEPHON_NNODES" --ntasks-per-node=1)

# A plain assignment, not `export X=$(...)`: export would succeed whatever the command
# substitution did, and set -e would go on with an empty resume point. A set ZEPHON_RESUME
# that differs from the journals' point stops the job here, before anything is mounted,
# unless ZEPHON_RESUME_OVERRIDE=1 (e.g. restoring an older checkpoint): sbatch exports the
# submitting shell's environment, where one may be left from an earlier job.
ZEPHON_RESUME=$("$node_script" resume-point --allow-override)
export ZEPHON_RESUME
echo "slurm-zephon.sh: $ZEPHON_NNODES nodes x $ZEPHON_RANKS_PER_NODE ranks (data-parallel degree $dp), resume=$ZEPHON_RESUME, mounts at $ZEPHON_MOUNT" >&2

mount_pid=
cleanup() {
	trap - EXIT INT TERM
	"${per_node[@]}" "$self" umount || true
	[ -z "$mount_pid" ] || wait "$mount_pid" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

"${per_node[@]}" "$self" node &
mount_pid=$!
"${per_node[@]}" "$self" wait
set +e
"$@"
status=$?
set -e
exit $status
