"""How different two losses' updates are on the same batch: the cosine between their gradients, the ratio
of their norms, and the share of completion tokens whose per-token weights differ.

Every loss here is a function of the per-token log-probs, so its gradient is J^T w, with J the log-probs'
Jacobian in the weights and w = dL/dlogp the loss's weight on each token (the advantage times the clip's,
the normaliser's and the ratio's factors, plus the KL's part). The two losses are given the same forward
(one pass, two backwards), so every difference is the losses'. Two kinds of difference are counted apart:
`token_weights_differ` counts every token whose weights are not equal (a normaliser that divides by
another count makes it 1 without changing the direction), `token_weights_differ_scaled` compares after
the one scalar that best maps one weight vector onto the other, so what it counts (clipped or masked
tokens, per-sequence normalisers) changes the direction of the update.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from twinkle_exp.loss import LossFn
from twinkle_exp.policy.logprobs import sequence_logps
from twinkle_exp.training.micro_loss import LossExtras, micro_batch_loss
from twinkle_exp.training.update_plan import UpdatePlan

# The columns of a comparison, each defined here once (the command's CSV header, in this order).
COSINE = "grad_cosine"
NORM_RATIO = "grad_norm_ratio"  # |g_b| / |g_a|
NORM_A, NORM_B = "grad_norm_a", "grad_norm_b"
WEIGHTS_DIFFER = "token_weights_differ"
WEIGHTS_DIFFER_SCALED = "token_weights_differ_scaled"
COLUMNS = (COSINE, NORM_RATIO, NORM_A, NORM_B, WEIGHTS_DIFFER, WEIGHTS_DIFFER_SCALED)
RTOL = 1e-3  # weights within this share of the larger one's magnitude are equal (float32 sums differ)


@dataclass
class Gradient:
    flat: torch.Tensor  # [P] the gradient of the loss in every trainable parameter, concatenated
    token_weights: torch.Tensor  # [n, T] dL/dlogp per position (0 off the completion)


def _differ(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # [k] bool, a and b: [k]
    scale = torch.maximum(a.abs(), b.abs()).max().clamp_min(1e-30)
    return (a - b).abs() > RTOL * scale


def compare(a: Gradient, b: Gradient, mask: torch.Tensor) -> dict[str, float]:
    """The columns of `COLUMNS` for `a` against `b`; `mask` `[n, T]` bool marks the completion tokens."""
    if a.flat.shape != b.flat.shape or a.token_weights.shape != b.token_weights.shape:
        raise ValueError(
            f"the two gradients are of different shapes: {tuple(a.flat.shape)} and {tuple(b.flat.shape)}"
        )
    ga, gb = a.flat.double(), b.flat.double()
    na, nb = ga.norm(), gb.norm()
    cosine = float(ga @ gb / (na * nb)) if na > 0 and nb > 0 else float("nan")
    wa, wb = a.token_weights[mask].double(), b.token_weights[mask].double()
    # The least-squares scalar c of c * wb ~ wa: a difference that one scalar absorbs is not counted.
    c = (wa @ wb) / (wb @ wb) if wb.abs().sum() > 0 else torch.tensor(0.0, dtype=torch.float64)
    tokens = max(int(mask.sum()), 1)
    return {
        COSINE: cosine,
        NORM_RATIO: float(nb / na) if na > 0 else float("nan"),
        NORM_A: float(na),
        NORM_B: float(nb),
        WEIGHTS_DIFFER: float(_differ(wa, wb).sum()) / tokens,
        WEIGHTS_DIFFER_SCALED: float(_differ(wa, c * wb).sum()) / tokens,
    }


def gradients(
    policy: torch.nn.Module,
    losses: list[LossFn],
    plan: UpdatePlan,
    rows: torch.Tensor,
    temperature: float,
    extras: LossExtras | None = None,
) -> list[Gradient]:
    """Each of `losses`' gradient on the rows `rows` (`[n]` long, on the CPU) of `plan`, from one forward of
    `policy` (in the mode it is in; its .grad fields are left alone). The normalisers are the rows' own
    totals, as in an optimizer step on those rows; `extras` (the run's rollout correction and per-token
    advantages, `step_parts.loss_extras`) are applied as the step applies them (`micro_loss.py`)."""
    b, params = plan.rollout, [p for p in policy.parameters() if p.requires_grad]
    extras = extras or LossExtras()
    device = b.input_ids.device
    idx = rows.to(device)
    needs_entropy = extras.needs_entropy or any(f.needs_entropy for f in losses)
    logps, entropy = sequence_logps(
        policy,
        b.input_ids[idx],
        b.attention_mask[idx],
        b.position_ids[idx],
        b.labels[idx],
        temperature=temperature,
        with_entropy=needs_entropy,
        entropy_grad=any(f.entropy_grad for f in losses),
    )
    mask = b.completion_mask[idx]
    totals = {"num_sequences": len(rows), "num_tokens": int(mask.sum())}
    advantages = plan.adv.advantages[: b.input_ids.shape[0]].to(device)[idx]
    out = []
    for i, loss_fn in enumerate(losses):
        result, _ = micro_batch_loss(loss_fn, plan, idx, logps, entropy, advantages, totals, extras)
        grads = torch.autograd.grad(
            result.loss, [logps, *params], retain_graph=i < len(losses) - 1, allow_unused=True
        )
        flat = torch.cat(
            [
                (torch.zeros_like(p) if g is None else g).reshape(-1)
                for g, p in zip(grads[1:], params, strict=True)
            ]
        )
        weights = torch.zeros_like(logps) if grads[0] is None else grads[0]
        out.append(Gradient(flat.detach(), weights.detach().masked_fill(~mask, 0.0)))
    return out
