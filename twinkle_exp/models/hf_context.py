"""What the start-up checks need of a Hugging Face policy without its weights: its tokenizer and context.

Loading the config and the tokenizer takes a second; the weights can take minutes and gigabytes, so a
prompt too long for the model, or a model directory that is not there, is found before they are read.
"""

from __future__ import annotations

import os

from twinkle_exp.models.hf import HFTokenizerAdapter, _import_transformers

# transformers' placeholder model_max_length for a tokenizer whose config sets none (int(1e30)).
_UNSET_MAX_LENGTH = 10**18


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:400]


def _looks_like_a_path(name_or_path: str) -> bool:
    # A hub id is "name" or "owner/name"; anything else with a separator, or a path's prefix, is meant as a path.
    return (
        name_or_path.startswith(("/", ".", "~"))
        or name_or_path.count("/") > 1
        or os.sep + os.sep in name_or_path
    )


def check_model_source(key: str, name_or_path: str) -> None:
    """ValueError naming `key` when `name_or_path` is meant as a local directory and none is there.

    transformers would take it for a hub id and answer "Repo id must be in the form ...".
    """
    path = os.path.expanduser(name_or_path)
    if os.path.isdir(path):
        return
    if os.path.exists(path):
        raise ValueError(f"{key}={name_or_path!r} is a file; it must be a model directory or a hub id")
    if _looks_like_a_path(name_or_path):
        raise ValueError(f"{key}={name_or_path!r}: no such directory (relative to {os.getcwd()!r})")


def tokenizer_and_context(
    name_or_path: str, trust_remote_code: bool = False, key: str = "policy.name_or_path"
) -> tuple[HFTokenizerAdapter, int | None, str]:
    """The policy's tokenizer, its number of positions (None: unknown) and where that number comes from.

    The model config's `max_position_embeddings` (or `n_positions`) decides; without one, the tokenizer's
    `model_max_length` when it sets one. ValueError naming `key` when either cannot be loaded.
    """
    check_model_source(key, name_or_path)
    transformers = _import_transformers()
    try:
        config = transformers.AutoConfig.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            name_or_path, trust_remote_code=trust_remote_code
        )
    except Exception as exc:  # offline, a typo in the id, a directory without config.json or tokenizer
        where = "the directory" if os.path.isdir(os.path.expanduser(name_or_path)) else "the hub id"
        raise ValueError(f"{key}={name_or_path!r}: cannot load {where} ({_one_line(exc)})") from None
    for name in ("max_position_embeddings", "n_positions"):
        positions = getattr(config, name, None)
        if isinstance(positions, int) and positions > 0:
            return HFTokenizerAdapter(tokenizer), positions, name
    limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(limit, int) and 0 < limit < _UNSET_MAX_LENGTH:
        return HFTokenizerAdapter(tokenizer), limit, "the tokenizer's model_max_length"
    return HFTokenizerAdapter(tokenizer), None, "unknown"
