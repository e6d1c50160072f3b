"""The analysis: the comparison report of one or more sweeps, with interval estimates over seeds, pairwise
comparisons, diagnostics of the traps that make GRPO-family comparisons mislead, and plots.

Run as `python -m twinkle_exp.report <dir> [<dir> ...]` or `twinkle-report`; it needs neither wandb nor the
network, only each job's run.json, .hydra/ files and metrics.csv. Its parts, in the order they run:
`loading`, `statistics`, `diagnostics`, `rendering` (and `findings`, papers' claims decided from a sweep).
It needs the `[report]` extra (scipy, matplotlib), which the trainer never imports; a run's own end-of-run
summary lives with the trainer (`twinkle_exp.summary`).
"""

from __future__ import annotations

import sys
from pathlib import Path

EXTRA_HINT = "pip install 'twinkle_exp[report]'"


def _missing_extra() -> list[str]:
    missing = []
    for name in ("scipy", "matplotlib"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    return missing


if _missing := _missing_extra():
    _message = (
        f"twinkle_exp.report needs the [report] extra ({', '.join(_missing)} not installed): {EXTRA_HINT}"
    )
    # A command (`python -m twinkle_exp.report...`, whose argv[0] is "-m" while the package loads, or the
    # twinkle-report script) says so in one line, exit 2; an import from Python raises.
    if sys.argv[:1] == ["-m"] or Path(sys.argv[0] if sys.argv else "").name == "twinkle-report":
        print(f"twinkle_exp: {_message}", file=sys.stderr)
        raise SystemExit(2)
    raise ModuleNotFoundError(_message)
