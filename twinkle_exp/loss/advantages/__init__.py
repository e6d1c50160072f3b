"""Advantage estimators, one file each, registered by name (`registry.ESTIMATORS`); `advantage=<name>`."""

from . import group_relative, leave_one_out, opo, passk, reinforce_pp, sample_signs  # noqa: F401 (register)
from .group_relative import SCALES, group_advantages
from .registry import ESTIMATORS, AdvantageResult, AdvantageSettings, Estimator, estimate, register

__all__ = [
    "ESTIMATORS",
    "SCALES",
    "AdvantageResult",
    "AdvantageSettings",
    "Estimator",
    "estimate",
    "group_advantages",
    "register",
]
