"""The run's `.hydra/` record (config.yaml, hydra.yaml, overrides.yaml), written by the project, not by Hydra.

Hydra would write these three files at every start, truncating each first, before the project has decided
whether the start continues the run in the directory, refuses, or moves it aside (conf/config.yaml sets
`hydra.output_subdir: null` so that it does not). A kill in that window emptied a finished run's record,
and a refused start of another experiment left its own config there (issue 48). So the same three texts
(Hydra's format: `OmegaConf.to_yaml`, interpolations unresolved) are written here once the run is known to
start (`lifecycle.session.RunSession.begin`), each atomically and only where its bytes change.

run.json carries the record's identity (`identity`): the digest of config.yaml's bytes, the overrides and the
config groups' chosen options. The report checks `.hydra/` against it (`record_differences`) and labels a run
by run.json when the two disagree.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml

from twinkle_exp.tracking.atomic_file import replace_bytes

HYDRA_DIR = ".hydra"
CONFIG, HYDRA, OVERRIDES = "config.yaml", "hydra.yaml", "overrides.yaml"


def record_of_job(task_cfg: Any) -> dict[str, bytes] | None:
    """The three files' bytes for the running Hydra job whose task config is `task_cfg` (a DictConfig, as the
    task function received it); None outside a Hydra job (a test calling `run.train` directly)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    if not HydraConfig.initialized():
        return None
    hydra_cfg = HydraConfig.instance().cfg  # {"hydra": ...}, as Hydra saves it
    return {
        CONFIG: OmegaConf.to_yaml(task_cfg).encode(),
        HYDRA: OmegaConf.to_yaml(hydra_cfg).encode(),
        OVERRIDES: OmegaConf.to_yaml(hydra_cfg.hydra.overrides.task).encode(),
    }


def write_record(run_dir: Path, record: dict[str, bytes]) -> list[str]:
    """Write `record` into `run_dir/.hydra/`, each file atomically; returns the names whose bytes changed."""
    return [
        name for name, content in record.items() if replace_bytes(Path(run_dir) / HYDRA_DIR / name, content)
    ]


def config_digest(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def identity(record: dict[str, bytes], choices: dict[str, str]) -> dict[str, Any]:
    """What run.json says the record holds: config.yaml's digest, the overrides (all of them, as typed) and the
    chosen option of each config group (`choices`: `JobInfo.choices`)."""
    overrides = yaml.safe_load(record[OVERRIDES]) or []
    return {"config_sha256": config_digest(record[CONFIG]), "overrides": overrides, "choices": dict(choices)}


def record_differences(run_dir: Path, expected: dict[str, Any]) -> list[str]:
    """How `run_dir/.hydra/` differs from run.json's `identity` (`expected`), one phrase each; [] when it agrees."""
    hydra_dir = Path(run_dir) / HYDRA_DIR
    found: list[str] = []
    try:
        digest = config_digest((hydra_dir / CONFIG).read_bytes())
    except OSError:
        digest = None
    if digest is None:
        found.append(f"{HYDRA_DIR}/{CONFIG} is missing")
    elif digest != expected.get("config_sha256"):
        found.append(f"{HYDRA_DIR}/{CONFIG} is not the config run.json records")
    overrides = _load(hydra_dir / OVERRIDES)
    if overrides != expected.get("overrides"):
        found.append(f"{HYDRA_DIR}/{OVERRIDES} says {overrides!r}, run.json {expected.get('overrides')!r}")
    hydra = _load(hydra_dir / HYDRA)
    choices = _at(hydra, "hydra", "runtime", "choices")
    chosen = {
        str(k): str(v)
        for k, v in choices.items()
        if v is not None and not str(k).startswith(("hydra", "schema/"))
    }
    wanted = expected.get("choices")
    if isinstance(wanted, dict) and chosen != {str(k): str(v) for k, v in wanted.items()}:
        differing = sorted(k for k in set(chosen) | set(wanted) if chosen.get(k) != wanted.get(k))
        said = ", ".join(f"{k}={chosen.get(k)} (run.json: {wanted.get(k)})" for k in differing[:3])
        found.append(f"{HYDRA_DIR}/{HYDRA} chose {said}")
    return found


def _at(node: Any, *keys: str) -> dict:
    """node[k1][k2]... when each is a mapping, else {}."""
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _load(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
