#!/usr/bin/env bash
# The regime sweeps of docs/comparing.md: each loss at its tuned choice (the verdict commands that
# `python -m twinkle_exp.report.tuning select ... --out CHOICES.yaml` wrote), with one regime's overrides,
# into multirun/regime/<regime>/; then each regime's report (--group-by loss) and the regimes side by side.
#   bash sweeps/regimes.sh CHOICES.yaml [regime ...]   (default: every regime below; seeds as in the verdict)
#   SEEDS=0,1,2,3,4 bash sweeps/regimes.sh CHOICES.yaml long_completions   (other seeds than the verdict's)
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
declare -A REGIME=(
  [staleness1]="rollout.staleness=1"
  [staleness4]="rollout.staleness=4"
  [minibatches16]="optim.mu=1 optim.num_minibatches=16"
  [sampler_bf16]="rollout.sampler_dtype=bfloat16"
  [sampler_bf16_tis]="rollout.sampler_dtype=bfloat16 optim.rollout_correction.mode=tis"
  [long_completions]="+experiment=long_completions"
)
choices=${1:?usage: bash sweeps/regimes.sh CHOICES.yaml [regime ...]}
[ -f "$choices" ] || { echo "regimes.sh: no such file $choices (write it with report.tuning select --out)" >&2; exit 2; }
shift
regimes=("$@")
[ ${#regimes[@]} -gt 0 ] || regimes=(staleness1 staleness4 minibatches16 sampler_bf16 sampler_bf16_tis long_completions)
[[ -z "${SEEDS:-}" || "$SEEDS" =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "regimes.sh: SEEDS must be a comma-separated list of seeds, got $SEEDS" >&2; exit 2; }
for r in "${regimes[@]}"; do
  [ -n "${REGIME[$r]+x}" ] || { echo "regimes.sh: unknown regime $r; known: ${!REGIME[*]}" >&2; exit 2; }
done
mapfile -t commands < <(python -c "import sys, yaml; print('\n'.join(yaml.safe_load(open(sys.argv[1]))['verdict_commands']))" "$choices")
verdict_dir=$(printf '%s\n' "${commands[0]}" | grep -o 'hydra.sweep.dir=[^ ]*' | cut -d= -f2)
reports=("default=$verdict_dir/report")
[ -f "$verdict_dir/report/verdicts.csv" ] || python -m twinkle_exp.report "$verdict_dir" --group-by loss --out "$verdict_dir/report"
for r in "${regimes[@]}"; do
  start=$(date +%s)
  for cmd in "${commands[@]}"; do
    cmd=${cmd//hydra.sweep.dir=$verdict_dir/hydra.sweep.dir=multirun/regime/$r}
    cmd=${cmd//_verdict /_regime_$r }
    [ -z "${SEEDS:-}" ] || cmd=$(sed -E "s/(^| )seed=[0-9,]+/\1seed=$SEEDS/" <<<"$cmd")
    # shellcheck disable=SC2086
    eval "$cmd" ${REGIME[$r]} hydra/launcher=local_parallel logger=csv trainer.save_checkpoint=false ${OVERRIDES:-}
  done
  echo "regimes.sh: $r took $(( $(date +%s) - start )) s"
  python -m twinkle_exp.report "multirun/regime/$r" --group-by loss --out "multirun/regime/$r/report"
  reports+=("$r=multirun/regime/$r/report")
done
python -m twinkle_exp.report.regimes "${reports[@]}" --out multirun/regime/regimes.md
