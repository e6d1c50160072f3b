"""`python -m twinkle_exp [overrides]`: the Hydra entry point."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from twinkle_exp.config import register_configs
from twinkle_exp.launcher_env import rank_hydra_overrides

register_configs()


@hydra.main(config_path="pkg://twinkle_exp.conf", config_name="config", version_base="1.3")
def _main(cfg: DictConfig) -> float:
    from twinkle_exp.run import train  # heavy imports after Hydra has parsed --help and overrides

    # The return value is what Hydra's Optuna sweeper maximises.
    return train(cfg)["accuracy_after"]


def main() -> None:
    sys.argv += rank_hydra_overrides()  # torchrun/srun ranks > 0 share rank 0's directory quietly
    _main()


if __name__ == "__main__":
    main()
