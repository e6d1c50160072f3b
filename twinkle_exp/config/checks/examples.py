"""The task's examples against the policy and the reward, one line per problem (built objects' checks).

Each line names the file and row (or line) of the example at fault. They run on every example the task
holds (`Task.located_examples`), with the policy's own tokenizer (loaded without the weights for a
Hugging Face model), so what they accept is what the run will see.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from twinkle_exp.models.tokenizer import encode_prompt

Located = list[tuple[Any, str]]  # (Example, where it comes from)


def policy_tokenizer(
    kind: str | None, policy: dict[str, Any], task: Any
) -> tuple[Any, int | None, str, str] | None:
    """(tokenizer as the run encodes prompts, positions, what sets them, how to get more) for a registered
    policy (`kind`: its name in `POLICIES`), else None.

    ValueError naming the setting when the model cannot be found or the task's prompt format cannot apply.
    """
    if kind == "tiny":
        from twinkle_exp.models import CharTokenizer

        tokenizer, positions = CharTokenizer(), policy["max_seq_len"]
        limit = f"policy.max_seq_len={positions}"
        remedy = (
            "raise policy.max_seq_len (the built-in policy is for short prompts; policy=hf for real models)"
        )
    elif kind == "hf":
        from twinkle_exp.models.gguf import is_gguf_source, resolve_source, source_problems
        from twinkle_exp.models.hf_context import check_model_source, tokenizer_and_context

        name = policy["name_or_path"]
        if source_problems(policy):
            return None  # the GGUF file is missing: that line is the environment check's
        # A GGUF file is read through its converted directory (converted once here, reused by the build).
        local = resolve_source(name) if is_gguf_source(name) else name
        tokenizer, positions, source = tokenizer_and_context(local, bool(policy.get("trust_remote_code")))
        limit = f"policy.name_or_path={name!r} ({positions} positions, its {source})"
        remedy = "use a model with more positions"
        reference = policy.get("reference_name_or_path")
        if reference and not is_gguf_source(reference):
            check_model_source("policy.reference_name_or_path", reference)
    else:
        return None  # a policy of the user's own: its tokenizer is only known once it is built
    if getattr(task, "chat_template", False):
        from twinkle_exp.models.chat import with_chat_template

        tokenizer = with_chat_template(tokenizer, getattr(task, "system_prompt", None))
    return tokenizer, positions, limit, remedy


# Longer prompts are tokenized this far only: a runaway line (a whole file on one line, 50 MB) costs a
# fraction of a second here instead of the tokenizer's memory, and its head alone outgrows any context.
MAX_PROMPT_CHARS = 1_000_000


def prompt_tokens(tokenizer: Any, prompt: str) -> tuple[int, bool]:
    """(tokens of `prompt` as the run encodes it, whether that is all of it: False for its head only)."""
    if len(prompt) <= MAX_PROMPT_CHARS:
        return len(encode_prompt(tokenizer, prompt)), True
    return len(encode_prompt(tokenizer, prompt[:MAX_PROMPT_CHARS])), False


def prompt_length_problems(
    located: Located, tokenizer: Any, positions: int | None, max_new_tokens: int, limit: str, remedy: str
) -> Iterator[str]:
    """The longest prompt plus the sampling budget against the model's positions, naming where it is."""
    if positions is None or not located:
        return
    longest, where, whole = 0, "", True
    seen: set[str] = set()
    for example, place in located:
        if example.prompt in seen:
            continue
        seen.add(example.prompt)
        length, complete = prompt_tokens(tokenizer, example.prompt)
        if not complete and length + max_new_tokens <= positions:  # a huge prompt of few tokens: count all
            length, complete = len(encode_prompt(tokenizer, example.prompt)), True
        if length > longest:
            longest, where, whole = length, place, complete
    if longest + max_new_tokens > positions:
        up_to = "up to" if whole else "at least"
        cut = "" if whole else f", counted in its first {MAX_PROMPT_CHARS} characters"
        yield (
            f"{limit}: prompts of {up_to} {longest} tokens plus rollout.max_new_tokens={max_new_tokens} need "
            f"{longest + max_new_tokens} (the longest prompt: {where}{cut}); shorten the prompts, lower "
            f"rollout.max_new_tokens or {remedy}"
        )


def answer_budget_problems(
    located: Located, tokenizer: Any, max_new_tokens: int, truncated_max: float | None
) -> Iterator[str]:
    """No gold answer fits in the sampling budget with its EOS: every completion is cut off and capped.

    Then every reward of a group is the same (reward.truncated_max), every advantage and gradient 0.
    """
    if truncated_max is None or not located:
        return
    eos = 0 if tokenizer.eos_token_id is None else 1
    shortest = min(len(tokenizer.encode(example.answer)) + eos for example, _ in located)
    if shortest > max_new_tokens:
        yield (
            f"rollout.max_new_tokens={max_new_tokens}: the shortest gold answer takes {shortest} tokens with its "
            f"EOS, so every completion is cut off, scores at most reward.truncated_max={truncated_max:g}, and "
            f"every advantage and gradient is 0; raise rollout.max_new_tokens to at least {shortest} "
            f"(or set reward.truncated_max=null)"
        )


def _math_terms(reward: dict[str, Any]) -> list[dict[str, Any]]:
    from twinkle_exp.config.store import import_path
    from twinkle_exp.rewards import math_reward

    targets = (import_path(math_reward), f"{math_reward.__module__}.{math_reward.__qualname__}")
    return [
        term["fn"]
        for term in (reward.get("functions") or {}).values()
        if isinstance(term, dict)
        and isinstance(term.get("fn"), dict)
        and term["fn"].get("_target_") in targets
    ]


def gold_answer_problems(located: Located, reward: dict[str, Any]) -> Iterator[str]:
    """With a math reward: every distinct gold answer through the verifier's own check, before any rollout.

    Otherwise an answer math-verify cannot parse stops the run the first time its prompt is sampled.
    """
    terms = _math_terms(reward)
    if not terms or not located:
        return
    from twinkle_exp.verifier import math_check

    timeout_s = float(terms[0].get("timeout_s", 5.0))
    first: dict[str, str] = {}
    for example, place in located:
        first.setdefault(example.answer, place)
    golds = list(first)
    try:
        outcomes = _check_golds(golds, timeout_s)
    except ImportError as exc:
        yield f"reward=math needs math-verify ({exc}): pip install twinkle_exp[math]"
        return
    bad = [gold for gold, outcome in zip(golds, outcomes, strict=True) if outcome == math_check.BAD_GOLD]
    if bad:
        yield (
            f"{first[bad[0]]}: the gold answer {bad[0][:80]!r} does not parse as math for reward=math "
            f"({len(bad)} of {len(golds)} distinct gold answers do not); fix the rows or task.answer_extractor"
        )


def _check_golds(golds: list[str], timeout_s: float) -> list[str]:
    """The verifier's outcome for each gold answer against an empty completion (BAD_GOLD: it does not parse)."""
    from twinkle_exp.verifier import math_check

    if threading.current_thread() is threading.main_thread():  # the check's timer needs the main thread
        math_check.prepare()
        return [math_check.check_answer(gold, "", timeout_s) for gold in golds]
    from twinkle_exp.verifier.pool import TimeoutPool

    pool = TimeoutPool(
        math_check.check_answer, workers=1, timeout_s=2 * timeout_s + 1, prepare=math_check.prepare
    )
    try:
        return pool.map([(gold, "", timeout_s) for gold in golds])
    finally:
        pool.close()
