"""Which tile loops `hidden_log_probs` runs: PyTorch ops, or the Triton kernels (`backend="triton"`).

Triton is an optional dependency (the `triton` extra): nothing here imports it until the Triton loops are
chosen, so the package imports and runs without it, and `TRITON_INTERPRET` is read when they first are.
"""

from __future__ import annotations

import functools
import importlib.util
from types import ModuleType

import torch

from twinkle_exp.logprobs import hidden_chunks

BACKENDS = ("auto", "torch", "triton")
# "auto" takes the Triton kernels only once they have been compiled, checked and timed on a GPU
# (docs/performance.md): until then a CUDA run that has not asked for them keeps the PyTorch tiles.
FUSED_BY_DEFAULT = False
_KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@functools.cache
def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def tile_loops(backend: str, device: torch.device, dtype: torch.dtype) -> ModuleType:
    """The module whose `forward_tiles` / `backward_tiles` run the tiles (`hidden_chunks` or
    `fused_logprobs`) for `backend` ("auto", "torch" or "triton"), matmuls on `device` in `dtype`."""
    if backend == "torch":
        return hidden_chunks
    if backend == "auto":
        if FUSED_BY_DEFAULT and device.type == "cuda" and dtype in _KERNEL_DTYPES and triton_installed():
            from twinkle_exp.logprobs import fused_logprobs

            return fused_logprobs
        return hidden_chunks
    if not triton_installed():
        raise ValueError('backend="triton" needs the triton package: pip install "twinkle_exp[triton]"')
    if dtype not in _KERNEL_DTYPES:
        raise ValueError(f'backend="triton" takes {", ".join(map(str, _KERNEL_DTYPES))} inputs, got {dtype}')
    from twinkle_exp.logprobs import fused_kernels, fused_logprobs

    if device.type != "cuda" and not fused_kernels.INTERPRETED:
        raise ValueError(
            f'backend="triton" runs on CUDA devices, got {device.type} '
            "(on CPU only under TRITON_INTERPRET=1, set before its first use)"
        )
    return fused_logprobs
