"""Triton epilogue kernels of the hidden-state log-probs: one pass per logits tile, in registers.

The PyTorch tile loop (`hidden_chunks.py`) spends most of a GPU's time in ~25 elementwise kernels per tile
(the float32 copy, `sub`, `exp`, the label's gather/scatter, the reductions), each a full pass over the
tile in memory. Here the head's matmul stays with cuBLAS (it writes the `[r, v]` tile in the head's dtype,
bias included, rounded as `lm_head` rounds it) and one kernel per tile does the rest, one program per
token row, reading the tile once (forward: twice, the second from cache) and writing it at most once:

- `forward_tile`: the row's maximum and the label's logit (first read), then the sums of `exp(x - peak)`
  over the non-labels and, when asked, of `exp(x - peak) (x - peak)` for the entropy (second read, from
  cache), folded into the running statistics kept in `[r]` float32 vectors from tile to tile, exactly as
  `_OnlineSoftmax` does; with a frozen head it also writes `exp(x - peak)` (0 at the label) over the tile,
  the left factor of the `[r, H]` direction's matmul;
- `backward_tile`: rebuilds the softmax from the saved logsumexp and overwrites the tile with
  `coef * (onehot - softmax)`, the tile's gradient, in the head's dtype, ready for the two matmuls.

Importing this module decorates the kernels, and Triton reads `TRITON_INTERPRET` then (and again in the
modules it loads at the first launch): with it set to 1 for the process they run on CPU tensors (numpy),
which is how the tests check them without a GPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Whether the kernels below run in Triton's interpreter (numpy, CPU tensors): read as they are decorated
# (`triton.knobs`: Triton 3.4 on).
INTERPRETED = bool(triton.knobs.runtime.interpret)
# The widest block of columns a program holds at once; tests lower it to exercise the column loop.
MAX_BLOCK = 4096


@triton.jit
def _tempered(z_row, cols, mask, temperature):
    """The block `cols` of one row of tempered logits in float32, -inf outside the tile."""
    x = tl.load(z_row + cols, mask=mask, other=0.0).to(tl.float32)
    return tl.where(mask, x / temperature, float("-inf"))


@triton.jit
def _forward_tile_kernel(
    z_ptr,  # [r, width] the tile's logits (head dtype); overwritten by exp(x - peak) when WRITE_EXP
    labels_ptr,  # [r] int64 label ids
    peak_ptr,  # [r] float32 running max, updated
    picked_ptr,  # [r] float32 the label's tempered logit, written by the tile that holds it
    rest_ptr,  # [r] float32 running sum exp(x - peak) over non-labels, updated
    xlogx_ptr,  # [r] float32 running sum exp(x - peak) (x - peak) over non-labels, updated (WITH_ENTROPY)
    rescale_ptr,  # [r] float32 out: exp(old peak - new peak), for the caller's [r, H] sums (WRITE_EXP)
    width,
    v0,
    temperature,
    WITH_ENTROPY: tl.constexpr,
    WRITE_EXP: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    z_row = z_ptr + row.to(tl.int64) * width
    label = tl.load(labels_ptr + row) - v0
    vmax = tl.full([BLOCK], float("-inf"), tl.float32)
    vpick = tl.zeros([BLOCK], tl.float32)
    for start in range(0, width, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = _tempered(z_row, cols, cols < width, temperature)
        vmax = tl.maximum(vmax, x)
        vpick += tl.where(cols == label, x, 0.0)
    old_peak = tl.load(peak_ptr + row)
    peak = tl.maximum(old_peak, tl.max(vmax, 0))
    vsum = tl.zeros([BLOCK], tl.float32)
    vxlogx = tl.zeros([BLOCK], tl.float32)
    for start in range(0, width, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < width
        u = _tempered(z_row, cols, mask, temperature) - peak
        other = mask & (cols != label)  # the label's own term is added once, at the end
        u = tl.where(other, u, 0.0)  # no 0 * -inf outside the tile
        e = tl.where(other, tl.exp(u), 0.0)
        vsum += e
        if WITH_ENTROPY:
            vxlogx += e * u
        if WRITE_EXP:
            tl.store(z_row + cols, e.to(z_ptr.dtype.element_ty), mask=mask)
    scale = tl.exp(old_peak - peak)  # 0 on the first tile
    rest = tl.load(rest_ptr + row)
    if WITH_ENTROPY:
        # the sum of e * u so far, re-expressed relative to the new peak
        shift = tl.where(rest > 0, old_peak - peak, 0.0) * rest  # 0, not -inf * 0, on the first tile
        tl.store(xlogx_ptr + row, scale * (tl.load(xlogx_ptr + row) + shift) + tl.sum(vxlogx, 0))
    tl.store(rest_ptr + row, scale * rest + tl.sum(vsum, 0))
    tl.store(peak_ptr + row, peak)
    tl.store(picked_ptr + row, tl.sum(vpick, 0), mask=(label >= 0) & (label < width))
    if WRITE_EXP:
        tl.store(rescale_ptr + row, scale)


@triton.jit
def _backward_tile_kernel(
    z_ptr,  # [r, width] the tile's logits (head dtype), overwritten by its gradient
    labels_ptr,  # [r] int64
    lse_ptr,  # [r] float32 logsumexp of the tempered logits
    coef_ptr,  # [r] float32 upstream gradient / temperature
    width,
    v0,
    temperature,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    z_row = z_ptr + row.to(tl.int64) * width
    label = tl.load(labels_ptr + row) - v0
    lse = tl.load(lse_ptr + row)
    coef = tl.load(coef_ptr + row)
    for start in range(0, width, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < width
        x = _tempered(z_row, cols, mask, temperature)
        minus = -(tl.exp(x - lse) * coef)
        g = tl.where(cols == label, minus + coef, minus)
        tl.store(z_row + cols, g.to(z_ptr.dtype.element_ty), mask=mask)


def _launch_shape(z: torch.Tensor) -> tuple[int, int, int]:
    width = z.shape[1]
    block = min(triton.next_power_of_2(width), MAX_BLOCK)
    warps = 4 if block <= 1024 else 8 if block <= 2048 else 16
    return width, block, warps


def forward_tile(z, labels, v0: int, temperature: float, stats: dict, write_exp: bool) -> None:
    """Fold tile `z` `[r, v]` (logits of columns `v0 .. v0 + v`, bias included, contiguous) into `stats`
    (`[r]` float32 "peak", "picked", "rest", "xlogx" or None, "rescale" when `write_exp`)."""
    width, block, warps = _launch_shape(z)
    rest = stats["rest"]
    _forward_tile_kernel[(z.shape[0],)](
        z,
        labels,
        stats["peak"],
        stats["picked"],
        rest,
        rest if stats["xlogx"] is None else stats["xlogx"],
        stats["rescale"] if write_exp else rest,
        width,
        v0,
        temperature,
        WITH_ENTROPY=stats["xlogx"] is not None,
        WRITE_EXP=write_exp,
        BLOCK=block,
        num_warps=warps,
    )


def backward_tile(z, labels, v0: int, temperature: float, lse, coef) -> None:
    """Overwrite tile `z` `[r, v]` with `coef * (onehot - softmax)`; `lse`, `coef` `[r]` float32."""
    width, block, warps = _launch_shape(z)
    _backward_tile_kernel[(z.shape[0],)](
        z,
        labels,
        lse,
        coef,
        width,
        v0,
        temperature,
        BLOCK=block,
        num_warps=warps,
    )
