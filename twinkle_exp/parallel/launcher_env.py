"""What a launcher that starts every rank itself (torchrun, srun) tells a process before Hydra runs.

Read from the environment because it is needed before Hydra composes the config, long before Lightning
knows the rank; it only names files. Seeding and every rank-0 decision use `trainer.global_rank`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# Global rank as torchrun and srun export it. Lightning's own launcher sets neither for the ranks it
# starts (it passes them hydra.run.dir, hydra.output_subdir and hydra.job.name itself).
RANK_VARIABLES = ("RANK", "SLURM_PROCID")


def rank_hydra_overrides(env: Mapping[str, str] = os.environ) -> list[str]:
    """For a rank > 0: no second copy of `.hydra/` in the shared output directory, and a log file of its
    own (`rank<r>.log`) instead of appending to rank 0's `cli.log`."""
    for name in RANK_VARIABLES:
        value = env.get(name, "")
        if value.isdigit() and int(value) > 0:
            return ["hydra.output_subdir=null", f"hydra.job.name=rank{int(value)}"]
    return []
