"""`python -m twinkle_exp [overrides]`: the Hydra entry point."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from twinkle_exp import preemption
from twinkle_exp.config import register_configs

register_configs()


@hydra.main(config_path="pkg://twinkle_exp.conf", config_name="config", version_base="1.3")
def _main(cfg: DictConfig) -> float:
    # Before the slow imports: a signal from here on stops the run cleanly, with run.json saying so.
    preemption.install()
    try:
        from twinkle_exp.run import train  # heavy imports after Hydra has parsed --help and overrides

        # The return value is what Hydra's Optuna sweeper maximises.
        return train(cfg)["accuracy_after"]
    finally:
        preemption.restore()  # whatever happened: the next job of a sweep, or the shell, gets them back


def main() -> None:
    _main()


if __name__ == "__main__":
    main()
