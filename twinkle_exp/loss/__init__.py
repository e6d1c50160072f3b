"""GRPO-family policy-gradient losses on one shared pipeline (docs/losses.md, the README's loss table).

Names load on first use, so that `from twinkle_exp.loss import metric_keys` (the report's way in) and the
registry import no torch. A loss class is found by its class name (`twinkle_exp.loss.SAPOLoss`, the
`_target_` every run directory records) once the registry has loaded the objective modules.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> the module that defines it (the losses themselves come from the registry)
_EXPORTS = {
    "LossOutput": "core",
    "LossSpec": "core",
    "compute_loss": "core",
    "derived_clip_metrics": "core",
    "LOG_RATIO_CLAMP": "core",
    "completion_mask": "batch",
    "KL_ESTIMATORS": "kl",
    "kl_penalty": "kl",
    "param": "params",
    "LossFn": "protocol",
    "ROLLOUT_MODES": "rollout_correction",  # its function: `from twinkle_exp.loss.rollout_correction import ...`
    "PolicyGradientLoss": "base",
    "register_loss": "registry",
    "get_loss_class": "registry",
}

__all__ = sorted([*_EXPORTS, "LOSSES"])


def __getattr__(name: str) -> Any:
    # A name that is also a submodule's would be the submodule once that is imported: none is exported.
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    registry = importlib.import_module(f"{__name__}.registry")
    if name == "LOSSES":
        return registry.losses()
    if name.endswith("Loss") and not name.startswith("_"):
        for cls in registry.losses().values():
            if cls.__name__ == name and registry.target_path(cls) == f"{__name__}.{name}":
                return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
