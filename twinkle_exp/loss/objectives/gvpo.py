"""GVPO (Zhang et al., 2025, arXiv 2504.19599; the authors' verl recipe, jszkc/GVPO): a regression of each
sequence's centred log-ratio onto its centred reward, inside its group. Notation as in `clipped`, and per
sequence i of a group g of G: S_i = sum_t (logp - old) (the log-ratio of the whole sequence to the policy
that sampled it), A_i the sequence's advantage (the reward minus the group's mean: `advantage=unscaled`).
"""

from __future__ import annotations

import torch

from twinkle_exp.loss import seq_ops
from twinkle_exp.loss.base import PolicyGradientLoss
from twinkle_exp.loss.batch import TokenBatch
from twinkle_exp.loss.core import LossSpec
from twinkle_exp.loss.params import param, positive
from twinkle_exp.loss.registry import register_loss


@register_loss
class GVPOLoss(PolicyGradientLoss):
    """GVPO: per group, sum_i 0.5 ((b S_i - mean_g b S) - A_i)^2 / (G - 1), b = `gvpo_beta`.

    Its gradient is sum_i ((b S_i - mean_g b S) - A_i) b grad S_i: no importance ratio and no clip; the
    minimiser is the KL-regularised optimum with coefficient `gvpo_beta` towards the sampling policy. As the
    recipe (`compute_policy_loss_gvpo`), with each sequence's advantage A_i its reward minus its group's mean
    (`advantage=unscaled`). Here the step's loss is the recipe's per-group sum averaged over the step's groups
    (each sequence carries G / (G - 1) of its term, `seq_sum` over the step's sequences), so it is the same
    over any split into micro-batches of whole groups. It reads each sequence's group (`group_index`), so
    every call must hold whole groups of at least two (`whole_groups`). `clip_range` is unused; `beta` is
    the separate KL penalty to the frozen reference, as for every loss.
    """

    name = "gvpo"
    aggregation = "seq_sum"
    clip_sides = ()
    whole_groups = True
    applies_rollout_weights = True  # refused below: GVPO has no importance weight to correct
    applies_policy_keep = True  # refused below: a sequence's S is over all its tokens

    gvpo_beta: float = param(0.1, positive)

    def per_token(self, spec: LossSpec, b: TokenBatch, ratio: torch.Tensor) -> tuple[torch.Tensor, dict]:
        if b.group_ids is None:
            raise ValueError("gvpo needs each sequence's group: pass group_index [num_sequences]")
        if b.weights is not None:
            raise ValueError("gvpo takes no rollout-correction weights (it has no importance ratio)")
        if b.policy_keep is not None and not torch.equal(b.policy_keep, b.mask):
            raise ValueError("gvpo takes no token switches (top_entropy_quantile, the off-policy mask)")
        groups, group_of = torch.unique(b.group_ids, return_inverse=True)  # group_of: [num_seqs]
        size = torch.bincount(group_of, minlength=len(groups)).to(b.logps.dtype)  # [num_groups]
        if bool((size < 2).any()):
            raise ValueError("gvpo needs whole groups of at least two sequences in every call")
        scaled = self.gvpo_beta * seq_ops.seq_sum(b.logps - b.old_logps, b)  # [num_seqs] b S_i, with grad
        group_mean = torch.zeros_like(size).index_add(0, group_of, scaled) / size  # [num_groups]
        residual = (scaled - group_mean[group_of]) - seq_ops.seq_mean(b.advantages, b)  # [num_seqs]
        seq_loss = 0.5 * residual.square() * size[group_of] / (size[group_of] - 1)
        return seq_ops.spread(seq_loss, b), {}
