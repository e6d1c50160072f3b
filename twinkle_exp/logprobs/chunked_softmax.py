"""Pieces shared by the chunked log-prob paths (from logits and from hidden states).

Both hold one float32 chunk of logits at a time and overwrite it in place, in buffers reused from chunk to
chunk: a fresh 32 MiB tensor costs more in page faults than the chunk's `exp` (measured on CPU: 35 ms to
allocate and fill one, 4.5 ms to copy into a reused one), and every extra temporary is another chunk-sized
pass over memory.
"""

from __future__ import annotations

import torch

# float32 elements in one chunk of logits (32 MiB): small next to the full logits (4096 tokens x 152k
# vocabulary = 2.3 GiB in float32), large enough that a chunk's matmul runs at full speed on a CPU.
CHUNK_ELEMENTS = 2**23
# On a GPU a 32 MiB tile is a few microseconds of work per kernel, and the ~25 kernels a tile launches
# dominate: 128 MiB tiles (see `chunk_elements`).
CUDA_CHUNK_ELEMENTS = 2**25


def chunk_elements(device: torch.device | str) -> int:
    """float32 elements of logits that one chunk holds on `device`."""
    return CUDA_CHUNK_ELEMENTS if torch.device(device).type == "cuda" else CHUNK_ELEMENTS


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    # float64 stays float64 so gradcheck can test the functions; everything else is computed in float32.
    return torch.float64 if dtype == torch.float64 else torch.float32


class Buffers:
    """Reusable contiguous `[rows, cols]` buffers, one per name, grown to the largest request."""

    def __init__(self, elements: int, device: torch.device):
        self.elements, self.device, self.flat = elements, device, {}

    def get(self, name: str, rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
        flat = self.flat.get(name)
        if flat is None or flat.dtype != dtype or flat.numel() < rows * cols:
            size = max(self.elements, rows * cols)
            flat = self.flat[name] = torch.empty(size, dtype=dtype, device=self.device)
        return flat[: rows * cols].view(rows, cols)


def exp_shifted_(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`x` `[c, V]` -> `exp(x - max)` in place; returns (max `[c]`, sum of the exps `[c]`)."""
    peak = x.amax(-1)
    total = x.sub_(peak[:, None]).exp_().sum(-1)
    return peak, total
