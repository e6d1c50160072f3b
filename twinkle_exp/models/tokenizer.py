"""A character-level tokenizer with a fixed vocabulary, and the prompt encoding shared by all tokenizers.

The interface (encode, decode, pad/bos/eos ids, vocab_size) is the one the rollout relies on;
``HFTokenizerAdapter`` exposes the same one over a Hugging Face tokenizer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import torch

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"
SPECIALS = (PAD, BOS, EOS)
CHARS = "".join(chr(c) for c in range(32, 127)) + "\n"


class Tokenizer(Protocol):
    """What the rollout and tasks need from a tokenizer."""

    @property
    def pad_token_id(self) -> int: ...
    @property
    def bos_token_id(self) -> int | None: ...
    @property
    def eos_token_id(self) -> int | None: ...
    @property
    def vocab_size(self) -> int: ...
    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: Iterable[int] | torch.Tensor, skip_special_tokens: bool = True) -> str: ...


class CharTokenizer:
    """Specials ``<pad>``=0, ``<bos>``=1, ``<eos>``=2, then printable ASCII 32..126, then ``\\n``."""

    def __init__(self) -> None:
        self._id_to_char = list(SPECIALS) + list(CHARS)
        self._char_to_id = {c: i + len(SPECIALS) for i, c in enumerate(CHARS)}

    @property
    def pad_token_id(self) -> int:
        return 0

    @property
    def bos_token_id(self) -> int:
        return 1

    @property
    def eos_token_id(self) -> int:
        return 2

    @property
    def vocab_size(self) -> int:
        return len(self._id_to_char)

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str) -> list[int]:
        ids = []
        for ch in text:
            i = self._char_to_id.get(ch)
            if i is None:
                raise ValueError(f"character {ch!r} is not in the CharTokenizer vocabulary")
            ids.append(i)
        return ids

    def decode(self, ids: Iterable[int] | torch.Tensor, skip_special_tokens: bool = True) -> str:
        """Text of `ids`; special tokens are dropped, or written as `<pad>`, `<bos>`, `<eos>` when kept."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        out = []
        for i in ids:
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"token id {i} is outside the vocabulary [0, {self.vocab_size})")
            if i >= len(SPECIALS) or not skip_special_tokens:
                out.append(self._id_to_char[i])
        return "".join(out)


def encode_prompt(tokenizer: Tokenizer, prompt: str) -> list[int]:
    """Prompt ids as the model sees them: BOS first when the tokenizer has one.

    A tokenizer with a prompt format of its own (a chat template: `ChatTemplateTokenizer`) has an
    `encode_prompt` method, and that decides instead. Every path that encodes a prompt (sampling, greedy
    validation, the warm-start) comes through here, so they all see the same format.
    """
    own_format = getattr(tokenizer, "encode_prompt", None)
    if own_format is not None:
        return own_format(prompt)
    ids = tokenizer.encode(prompt)
    if tokenizer.bos_token_id is not None:
        ids = [tokenizer.bos_token_id, *ids]
    return ids
