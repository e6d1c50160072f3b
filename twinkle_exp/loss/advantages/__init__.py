"""Advantage estimators, one file each, registered by name (`registry.register`, found by package scan;
`estimators()` adds the user's plug-in modules); `advantage=<name>`."""

from twinkle_exp import plugins

from .group_relative import SCALES, group_advantages
from .registry import (
    ESTIMATORS,
    AdvantageResult,
    AdvantageSettings,
    Estimator,
    estimate,
    estimators,
    register,
    token_shaping,
)

plugins.scan(__name__)  # every built-in estimator's file registers itself: adding one is adding a file

__all__ = [
    "ESTIMATORS",
    "SCALES",
    "AdvantageResult",
    "AdvantageSettings",
    "Estimator",
    "estimate",
    "estimators",
    "group_advantages",
    "register",
    "token_shaping",
]
