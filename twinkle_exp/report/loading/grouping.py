"""Which runs are the seeds of one variant: by their overrides less the seed, or by chosen config keys.

`--group-by loss,loss.tau` labels each run by the values those keys had in the run, wherever they came from:
a config group's chosen option (`loss` -> `sapo`, from .hydra/hydra.yaml), else the value in the job's resolved
config (`loss.tau` -> `0.5`, so `loss.tau=0.50` on one command line and `0.5` on another group together), else
the override as written. A key a run does not have (`loss.tau` of a GRPO run) is left out of its label. So
sweeps run at different times, with more seeds or from other directories, compare as one.
"""

from __future__ import annotations

from collections import defaultdict

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from twinkle_exp.tracking.run_json import override_key

from .runs import Run

_MISSING = object()


class GroupByError(ValueError):
    """A --group-by key that no run has: almost always a typo, so the report refuses rather than guess."""


def parse_group_by(text: str) -> list[str]:
    """ "loss, loss.tau" -> ["loss", "loss.tau"]; refuses empty keys and the seed (the seeds are the samples)."""
    keys = [k.strip() for k in text.split(",")]
    if not keys or any(not k for k in keys):
        raise GroupByError(f"--group-by takes comma-separated config keys, got {text!r}")
    if "seed" in keys:
        raise GroupByError(
            "--group-by seed would make every seed its own variant: seeds are what is averaged"
        )
    return keys


def assign_groups(runs: list[Run], keys: list[str]) -> None:
    """Set each run's `group` to ["key=value", ...] for the keys it has, in the order of `keys`.

    Raises GroupByError naming the keys that no run has.
    """
    values = [{key: config_value(run, key) for key in keys} for run in runs]
    unknown = [key for key in keys if all(v[key] is _MISSING for v in values)]
    if unknown and runs:
        raise GroupByError(
            f"--group-by: no run has {', '.join(repr(k) for k in unknown)} "
            "(not an override, a config group, or a key of any job's .hydra/config.yaml)"
        )
    for run, by_key in zip(runs, values, strict=True):
        run.group = [f"{key}={value}" for key, value in by_key.items() if value is not _MISSING]


def config_value(run: Run, key: str):
    """The value `key` had in `run` as a string, or `_MISSING`; see the module docstring for the order."""
    if key in run.choices:
        return run.choices[key]
    if run.config:
        value = _select(run.config, key)
        if value is not _MISSING and not isinstance(value, (dict, list)):
            return _plain(value)
    written = [o.split("=", 1)[1] for o in run.overrides if "=" in o and override_key(o) == key]
    return written[-1] if written else _MISSING


def _select(config: dict, key: str):
    # Hydra saves config.yaml unresolved (`${rollout.max_new_tokens}`): resolve where possible, else keep the text.
    """config["a"]["b"] for "a.b", resolved where it can be; `_MISSING` when absent."""
    node = OmegaConf.create(config)
    try:
        value = OmegaConf.select(node, key, default=_MISSING)
    except OmegaConfBaseException:
        value = OmegaConf.select(node, key, default=_MISSING, throw_on_resolution_failure=False)
    if value is _MISSING:
        return _MISSING
    return OmegaConf.to_container(value, resolve=False) if OmegaConf.is_config(value) else value


def _plain(value) -> str:
    """Short, stable text for a config value: 0.5 -> "0.5", None -> "null", True -> "true"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def group_by_variant(runs: list[Run]) -> dict[str, list[Run]]:
    """Runs keyed by variant label, labels sorted, runs sorted by seed then name within a variant."""
    groups: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        groups[run.variant].append(run)
    return {
        label: sorted(groups[label], key=lambda r: (r.seed is None, r.seed or 0, r.name))
        for label in sorted(groups)
    }


def flag_repeated_seeds(variants: dict[str, list[Run]]) -> None:
    """Add a problem to every run whose variant already has a finished run of the same seed.

    Two sweeps given together may both hold seed 0 of a variant (a rerun): both count as samples, which
    overstates the evidence if they are copies, so the report says so rather than dropping either.
    """
    for label, runs in variants.items():
        seen: dict[int, Run] = {}
        for run in runs:
            if run.seed is None or not run.finished:
                continue
            if run.seed in seen:
                run.problems.append(
                    f"seed {run.seed} of {label} also ran in {seen[run.seed].name}: both are counted as samples"
                )
            else:
                seen[run.seed] = run
