"""The Triton tile kernels (backend "triton") equal the PyTorch tile loops: values, entropy and gradients.

They run on CPU tensors in Triton's interpreter. Triton reads `TRITON_INTERPRET` when `@triton.jit`
decorates a kernel (here: when `fused_kernels` is first imported) and again in modules it imports lazily
at the first launch, and Lightning imports Triton: tests/conftest.py sets it before anything is imported,
for the whole session (set here too, for a run of this file alone); no other code here uses Triton on CPU. Tolerances: float32 inputs 1e-5 (both paths compute in float32 from
the same head-dtype tile, differing only in the order of float32 operations); bfloat16 inputs the same on
the values (the logits tile is the same bfloat16 matmul in both), and on the gradients 2^-6 of the largest
entry: both round each tile's gradient to bfloat16 (8 significant bits) before its matmul, and a float32
difference in the last bit can move an entry across a rounding boundary.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest
import torch

os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("numpy")  # the interpreter's arrays
pytest.importorskip("triton")

from twinkle_exp.logprobs import IGNORE_INDEX, fused_kernels, fused_logprobs, hidden_chunks, tile_backend  # noqa: E402
from twinkle_exp.logprobs import hidden_log_probs as _hidden_log_probs  # noqa: E402
from twinkle_exp.logprobs.tile_backend import tile_loops  # noqa: E402

if not fused_kernels.INTERPRETED:  # imported by someone before the variable was set: decorate again
    importlib.reload(fused_kernels)
    importlib.reload(fused_logprobs)

N_ROWS, T, H, V = 3, 7, 6, 13
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
HEADS = ("trained", "frozen", "tied")


def ragged_labels(gen) -> torch.Tensor:
    """[N_ROWS, T] with a prompt, early-EOS padding and a leading ignore: 14 labelled tokens."""
    labels = torch.randint(0, V, (N_ROWS, T), generator=gen)
    labels[0, :3] = IGNORE_INDEX
    labels[1, 5:] = IGNORE_INDEX
    labels[2, 0] = IGNORE_INDEX
    return labels


def run(backend, dtype, head, *, bias, temperature, entropy, chunks, seed=0, no_grad=False):
    """One forward + backward on fresh leaves built from `seed`: (logps, entropy, {leaf name: grad})."""
    gen = torch.Generator().manual_seed(seed)
    labels = ragged_labels(gen)
    trained = head != "frozen"
    weight = torch.randn(V, H, generator=gen).to(dtype).requires_grad_(trained)
    b = torch.randn(V, generator=gen).to(dtype).requires_grad_(trained) if bias else None
    if head == "tied":  # the head is the embedding: hidden states depend on it too
        ids = torch.randint(0, V, (N_ROWS, T), generator=gen)
        mix = torch.randn(H, H, generator=gen).to(dtype)
        hidden = torch.tanh(weight[ids] @ mix)  # [B, T, H] a stand-in for the transformer
        leaves = {"weight": weight}
    else:
        hidden = torch.randn(N_ROWS, T, H, generator=gen).to(dtype).requires_grad_(True)
        leaves = {"hidden": hidden, "weight": weight}
    if b is not None:
        leaves["bias"] = b
    upstream = torch.randn(N_ROWS, T, generator=gen)
    kwargs = dict(bias=b, temperature=temperature, with_entropy=entropy, backend=backend)
    kwargs.update(chunk_tokens=chunks[0], chunk_vocab=chunks[1])
    if no_grad:
        with torch.no_grad():
            logps, ent = _hidden_log_probs(hidden, weight, labels, **kwargs)
        return logps, ent, {}
    logps, ent = _hidden_log_probs(hidden, weight, labels, **kwargs)
    (logps * upstream).sum().backward()
    return logps.detach(), ent, {k: t.grad for k, t in leaves.items() if t.requires_grad}


def assert_same(dtype, case: dict) -> None:
    mine, ref = run("triton", dtype, **case), run("torch", dtype, **case)
    torch.testing.assert_close(mine[0], ref[0], atol=1e-5, rtol=1e-5)
    if case["entropy"]:
        torch.testing.assert_close(mine[1], ref[1], atol=1e-5, rtol=1e-5)
        assert not mine[1].requires_grad
    else:
        assert mine[1] is None
    assert mine[2].keys() == ref[2].keys()
    for name, grad in ref[2].items():
        assert mine[2][name].dtype == grad.dtype, name
        if dtype == torch.float32:
            torch.testing.assert_close(mine[2][name], grad, atol=1e-5, rtol=1e-5, msg=name)
        else:
            scale = grad.float().abs().max().item()
            err = (mine[2][name].float() - grad.float()).abs().max().item()
            assert err <= 2**-6 * scale, f"{name}: {err} > 2^-6 * {scale}"


# (4, 5) divides neither the 14 labelled tokens nor V = 13; (16, None): one tile of all 13 columns
FAST_CASES = [
    dict(bias=True, temperature=0.7, entropy=True, chunks=(4, 5)),
    dict(bias=False, temperature=1.0, entropy=False, chunks=(16, None)),
]


@pytest.mark.parametrize("case", FAST_CASES, ids=["bias_temp_entropy_4x5", "plain_one_tile"])
@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_triton_equals_torch(monkeypatch, dtype, head, case):
    monkeypatch.setattr(fused_kernels, "MAX_BLOCK", 4)  # several column blocks per row, the last ragged
    assert_same(dtype, dict(case, head=head))


@pytest.mark.slow
# (5, 2): 3 token chunks of 5, 5, 4 and 7 vocabulary tiles, the last one column wide
@pytest.mark.parametrize("chunks", [(4, 5), (5, 2), (16, None)], ids=["4x5", "5x2", "one_tile"])
@pytest.mark.parametrize("entropy", [False, True], ids=["logp", "entropy"])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_triton_equals_torch_every_combination(dtype, head, bias, temperature, entropy, chunks):
    assert_same(dtype, dict(head=head, bias=bias, temperature=temperature, entropy=entropy, chunks=chunks))


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_no_grad_forward_equals_torch(dtype):
    case = dict(head="trained", bias=True, temperature=0.8, entropy=True, chunks=(5, 4), no_grad=True)
    mine, ref = run("triton", dtype, **case), run("torch", dtype, **case)
    torch.testing.assert_close(mine[0], ref[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mine[1], ref[1], atol=1e-5, rtol=1e-5)


def test_large_logits_keep_the_online_softmax_stable():
    """Logits of +-100 whose maximum moves from tile to tile: the running sums are rescaled, not overflowed."""
    gen = torch.Generator().manual_seed(4)
    hidden = (torch.randn(9, H, generator=gen) * 12).requires_grad_(True)
    weight = torch.randn(V, H, generator=gen) * 3
    labels = torch.randint(0, V, (9,), generator=gen)
    out = {}
    for backend in ("triton", "torch"):
        logps, ent = _hidden_log_probs(
            hidden, weight, labels, with_entropy=True, chunk_tokens=4, chunk_vocab=3, backend=backend
        )
        logps.sum().backward()
        out[backend] = logps.detach(), ent, hidden.grad
        hidden.grad = None
    assert torch.isfinite(out["triton"][0]).all() and out["triton"][0].abs().max() > 50
    for mine, ref in zip(out["triton"], out["torch"], strict=True):
        torch.testing.assert_close(mine, ref, atol=1e-4, rtol=1e-5)


def test_no_labelled_token():
    hidden = torch.randn(2, 3, H, requires_grad=True)
    weight = torch.randn(V, H, requires_grad=True)
    labels = torch.full((2, 3), IGNORE_INDEX)
    logps, ent = _hidden_log_probs(hidden, weight, labels, with_entropy=True, backend="triton")
    ref, _ = _hidden_log_probs(hidden, weight, labels, with_entropy=True, backend="torch")
    assert logps.shape == (2, 3) and (logps == 0).all() and (ent == 0).all()
    assert logps.requires_grad == ref.requires_grad


def test_backend_choice(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert tile_loops("auto", cpu, torch.float32) is hidden_chunks  # CPU: the PyTorch loops
    assert tile_loops("auto", cuda, torch.bfloat16) is hidden_chunks  # not on by default before a GPU check
    monkeypatch.setattr(tile_backend, "FUSED_BY_DEFAULT", True)
    assert tile_loops("auto", cuda, torch.bfloat16) is fused_logprobs  # CUDA + triton: the kernels
    assert tile_loops("auto", cuda, torch.float64) is hidden_chunks  # float64 (gradcheck) stays torch
    assert tile_loops("torch", cuda, torch.float32) is hidden_chunks
    assert tile_loops("triton", cpu, torch.float32) is fused_logprobs  # here: the interpreter
    hidden, weight, labels = torch.randn(4, H), torch.randn(V, H), torch.zeros(4, dtype=torch.long)
    with pytest.raises(ValueError, match="backend must be one of"):
        _hidden_log_probs(hidden, weight, labels, backend="cuda")
    with pytest.raises(ValueError, match="float64"):
        _hidden_log_probs(hidden.double(), weight.double(), labels, backend="triton")


def test_triton_on_cpu_without_the_interpreter_is_refused(monkeypatch):
    monkeypatch.setattr(fused_kernels, "INTERPRETED", False)
    with pytest.raises(ValueError, match="runs on CUDA devices, got cpu"):
        _hidden_log_probs(
            torch.randn(4, H), torch.randn(V, H), torch.zeros(4, dtype=torch.long), backend="triton"
        )


def test_missing_triton_is_named(monkeypatch):
    from twinkle_exp.logprobs import tile_backend

    monkeypatch.setattr(tile_backend, "triton_installed", lambda: False)
    assert tile_loops("auto", torch.device("cuda"), torch.float32) is hidden_chunks
    with pytest.raises(ValueError, match=r"needs the triton package"):
        tile_loops("triton", torch.device("cuda"), torch.float32)


def test_benchmark_refuses_a_backend_the_device_cannot_run(monkeypatch, capsys):
    from benchmarks import logprobs as benchmark

    monkeypatch.setattr(fused_kernels, "INTERPRETED", False)
    with pytest.raises(SystemExit) as exit_info:
        benchmark.main(["--device=cpu", "--backend=triton"])
    assert exit_info.value.code == 2
    assert 'backend="triton" runs on CUDA devices, got cpu' in capsys.readouterr().err


@pytest.mark.slow
def test_the_package_imports_and_runs_without_triton():
    """Triton is optional: with it unimportable the library still imports, and "auto" runs the torch loops."""
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch, twinkle_exp, twinkle_exp.loss, twinkle_exp.policy.build\n"
        "from twinkle_exp.logprobs import hidden_log_probs\n"
        "h, w, y = torch.randn(4, 3), torch.randn(5, 3), torch.tensor([0, 1, 2, 4])\n"
        "print(hidden_log_probs(h, w, y)[0].shape)\n"
        "try:\n"
        "    hidden_log_probs(h, w, y, backend='triton')\n"
        "except ValueError as err:\n"
        "    print(err)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "torch.Size([4])",
        'backend="triton" needs the triton package: pip install "twinkle_exp[triton]"',
    ]
