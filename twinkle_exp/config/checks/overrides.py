"""The command line's top-level keys, before Hydra composes it: a typo there would otherwise go unnoticed.

Hydra answers `lose=sapo` with "use +lose=sapo", which would then train the default loss without a word.
(`+key=...` overrides compose, and the composed config's unknown keys are refused with its other problems.)
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.resources

from twinkle_exp.config.schema import Config

# Top-level names an override may start with besides Config's fields: Hydra's own, and the groups that are
# appended (+experiment=..., +sweep=...) or optional (debug=...).
_EXTRA_TOP_LEVEL = ("hydra", "experiment", "sweep", "debug")
# The policy options that ship LoRA settings (conf/policy/*.yaml); the others have `lora: null`.
_LORA_POLICIES = ("hf_lora", "smollm2")


def config_groups() -> list[str]:
    conf = importlib.resources.files("twinkle_exp.conf")
    return sorted(d.name for d in conf.iterdir() if d.is_dir() and not d.name.startswith(("_", "hydra")))


def known_top_level() -> list[str]:
    return sorted({f.name for f in dataclasses.fields(Config)} | set(config_groups()) | set(_EXTRA_TOP_LEVEL))


def unknown_top_level(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else "known: " + ", ".join(known)
    return f"'{key}' is not a config group or key ({hint})"


def override_problems(args: list[str]) -> list[str]:
    """Overrides of a top-level key that is neither a config field nor a group, and LoRA settings on a
    policy without them, one line each."""
    known = known_top_level()
    problems = []
    for arg in args:
        if arg.startswith(("-", "+", "~")) or "=" not in arg:
            continue  # Hydra's flags (-m, --cfg job, ...), additions and deletions
        top = arg.split("=", 1)[0].split(".", 1)[0].split("/", 1)[0]
        if top not in known:
            problems.append(f"{arg}: {unknown_top_level(top, known)}")
    return problems + _lora_problems(args)


def _lora_problems(args: list[str]) -> list[str]:
    """LoRA settings on a policy without them: Hydra would fail on its `lora: null` with an AssertionError."""
    choice = next((a.split("=", 1)[1] for a in reversed(args) if a.startswith("policy=")), "tiny")
    settings = [a for a in args if a.startswith("policy.lora.")]
    if (
        not settings or choice in _LORA_POLICIES or "," in choice
    ):  # a sweep over policies: Hydra decides per job
        return []
    return [
        f"{settings[0]}: policy={choice} has no LoRA settings; "
        "use policy=hf_lora policy.name_or_path=... to train LoRA adapters"
    ]
