"""A small pre-norm causal transformer with the call interface of a Hugging Face causal LM.

It lets the whole RL loop run on a CPU in seconds while the rollout, loss and training code stay
written against one interface: ``model(input_ids, attention_mask=, position_ids=, past_key_values=,
use_cache=)`` returning an object with ``.logits`` and ``.past_key_values``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

# One (key, value) pair per layer, each [B, H, S, Dh] where S counts every token seen so far.
KVCache = tuple[tuple[torch.Tensor, torch.Tensor], ...]


@dataclass(frozen=True)
class TinyLMConfig:
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    max_seq_len: int
    dropout: float


@dataclass
class TinyLMOutput:
    logits: torch.Tensor  # [B, T, V]
    past_key_values: KVCache | None = None


class SelfAttention(nn.Module):
    def __init__(self, cfg: TinyLMConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.dropout = cfg.dropout
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.out = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(
        self,
        x: torch.Tensor,  # [B, T, D]
        allowed: torch.Tensor,  # [B, 1, T, S] bool, True where a query may attend a key
        past: tuple[torch.Tensor, torch.Tensor] | None,  # ([B, H, Tpast, Dh], same)
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        dropout_p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=dropout_p)
        return self.out(y.transpose(1, 2).reshape(b, t, d)), (k, v)


class Block(nn.Module):
    def __init__(self, cfg: TinyLMConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, 4 * cfg.d_model),
            nn.GELU(),
            nn.Linear(4 * cfg.d_model, cfg.d_model),
        )
        self.drop = nn.Dropout(cfg.dropout)

    def forward(
        self,
        x: torch.Tensor,  # [B, T, D]
        allowed: torch.Tensor,  # [B, 1, T, S] bool
        past: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        a, kv = self.attn(self.norm1(x), allowed, past)
        x = x + self.drop(a)
        x = x + self.drop(self.mlp(self.norm2(x)))
        return x, kv


def attention_allowed(
    attention_mask: torch.Tensor,  # [B, S] 1 = real key, 0 = padding
    t: int,
) -> torch.Tensor:  # [B, 1, t, S] bool
    """Causal AND non-padding keys, for the last ``t`` of ``S`` positions as queries.

    A padding query (left padding of a prompt) would have no key left; older torch versions return NaN
    for such rows, which leaks through 0 * NaN in later sums. Letting every query see itself keeps it
    finite on every version. Real queries never see padding keys, so their outputs are unaffected.
    """
    s = attention_mask.shape[1]
    q_pos = torch.arange(s - t, s, device=attention_mask.device)[:, None]  # [t, 1]
    k_pos = torch.arange(s, device=attention_mask.device)[None, :]  # [1, S]
    causal = k_pos <= q_pos  # [t, S]
    allowed = causal[None] & attention_mask.bool()[:, None, :]  # [B, t, S]
    allowed = allowed | (k_pos == q_pos)[None]
    return allowed[:, None]


class TinyCausalLM(nn.Module):
    def __init__(
        self,
        vocab_size: int,
        *,
        d_model: int,
        n_layers: int,
        n_heads: int,
        max_seq_len: int,
        dropout: float,
    ):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.config = TinyLMConfig(vocab_size, d_model, n_layers, n_heads, max_seq_len, dropout)
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        # Learned absolute positions indexed by position_ids, so a left-padded prompt's first real token
        # gets position 0 exactly as it would unpadded.
        self.pos_emb = nn.Embedding(max_seq_len, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(self.config) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.apply(self._init_weights)
        self.lm_head.weight = self.tok_emb.weight  # tied after init so the shared matrix is drawn once

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())  # tied weights are counted once

    def get_output_embeddings(self) -> nn.Linear:
        """The output head (Hugging Face's name for it); its weight is the token embedding (tied)."""
        return self.lm_head

    def hidden_states(
        self,
        input_ids: torch.Tensor,  # [B, T]
        attention_mask: torch.Tensor | None = None,  # [B, T] 1 = real token, 0 = padding
        position_ids: torch.Tensor | None = None,  # [B, T]
    ) -> torch.Tensor:  # [B, T, D] after the final norm: `lm_head` of it gives `forward`'s logits
        """The final hidden states without the head, so log-probs can be taken without `[B, T, V]` logits."""
        return self.trunk(input_ids, attention_mask, position_ids, None)[0]

    def forward(
        self,
        input_ids: torch.Tensor,  # [B, T]
        attention_mask: torch.Tensor | None = None,  # [B, Tpast + T], 1 = real token, 0 = padding
        position_ids: torch.Tensor | None = None,  # [B, T]
        past_key_values: KVCache | None = None,
        use_cache: bool = False,
    ) -> TinyLMOutput:
        x, cache = self.trunk(input_ids, attention_mask, position_ids, past_key_values)
        return TinyLMOutput(logits=self.lm_head(x), past_key_values=cache if use_cache else None)

    def trunk(
        self,
        input_ids: torch.Tensor,  # [B, T]
        attention_mask: torch.Tensor | None,  # [B, Tpast + T]
        position_ids: torch.Tensor | None,  # [B, T]
        past_key_values: KVCache | None,
    ) -> tuple[torch.Tensor, KVCache]:  # final-normed hidden states [B, T, D], the extended cache
        """The model without its head, continuing `past_key_values` (the log-prob passes share prompts so)."""
        b, t = input_ids.shape
        t_past = 0 if past_key_values is None else past_key_values[0][0].shape[2]
        total = t_past + t
        if total > self.config.max_seq_len:
            raise ValueError(
                f"sequence length {total} (past {t_past} + new {t}) exceeds max_seq_len "
                f"{self.config.max_seq_len}"
            )
        if attention_mask is None:
            attention_mask = torch.ones(b, total, dtype=torch.long, device=input_ids.device)
        elif attention_mask.shape != (b, total):
            raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)}, expected {(b, total)}")
        if position_ids is None:
            # Counting real tokens gives left-padded rows the same positions as unpadded ones.
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, t_past:]

        x = self.drop(self.tok_emb(input_ids) + self.pos_emb(position_ids))
        allowed = attention_allowed(attention_mask, t)
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, allowed, None if past_key_values is None else past_key_values[i])
            new_cache.append(kv)
        return self.norm(x), tuple(new_cache)
