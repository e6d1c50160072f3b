"""Advantage estimators, one file each, registered by name (`registry.ESTIMATORS`); `advantage=<name>`."""

from . import (  # noqa: F401 (register)
    entropy_shaped,
    group_relative,
    leave_one_out,
    opo,
    passk,
    reinforce_pp,
    remax,
    sample_signs,
)
from .group_relative import SCALES, group_advantages
from .registry import (
    ESTIMATORS,
    AdvantageResult,
    AdvantageSettings,
    Estimator,
    estimate,
    register,
    token_shaping,
)

__all__ = [
    "ESTIMATORS",
    "SCALES",
    "AdvantageResult",
    "AdvantageSettings",
    "Estimator",
    "estimate",
    "group_advantages",
    "register",
    "token_shaping",
]
