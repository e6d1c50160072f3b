#!/usr/bin/env bash
# The findings ledger (docs/findings.md) end to end: each verdict sweep, then its claims' verdicts.
#   bash sweeps/ledger.sh [sweep ...]      (default: all of them; extra Hydra overrides in $OVERRIDES)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# sweep -> the claims (`--finding`) its runs decide
declare -A CLAIMS=(
  [finding_gspo_clipping]="gspo_clipping gspo_accuracy"
  [finding_drgrpo_length]="drgrpo_length"
  [finding_cispo_speed]="cispo_speed"
  [finding_dapo_entropy]="dapo_entropy"
  [claim_drgrpo_contrast]="drgrpo_length_contrast"
  [claim_spurious_reward]="spurious_reward_clip spurious_reward_null"
  [claim_rl_passk]="rl_passk_small_k rl_passk_large_k"
  [claim_entropy_law]="entropy_law_ceiling"
  [claim_nsr_passk]="nsr_passk"
  [claim_w_reinforce_passk]="w_reinforce_passk"
)
sweeps=("$@")
[ ${#sweeps[@]} -gt 0 ] || sweeps=(finding_gspo_clipping finding_drgrpo_length finding_cispo_speed finding_dapo_entropy
  claim_drgrpo_contrast claim_spurious_reward claim_rl_passk claim_entropy_law claim_nsr_passk claim_w_reinforce_passk)
for sweep in "${sweeps[@]}"; do
  [ -n "${CLAIMS[$sweep]+x}" ] || { echo "ledger.sh: unknown sweep $sweep; known: ${!CLAIMS[*]}" >&2; exit 2; }
done
for sweep in "${sweeps[@]}"; do
  start=$(date +%s)
  # shellcheck disable=SC2086
  python -m twinkle_exp -m "+sweep=$sweep" hydra/launcher=local_parallel logger=csv ${OVERRIDES:-}
  dir=$(ls -d "multirun/$sweep"/*/ | tail -1)
  args=()
  for claim in ${CLAIMS[$sweep]}; do args+=(--finding "$claim"); done
  python -m twinkle_exp.report.findings "$dir" "${args[@]}"
  echo "ledger.sh: $sweep in $(( $(date +%s) - start )) s, load $(cut -d' ' -f1-3 /proc/loadavg): $dir/findings/findings.md"
done
