"""Which completions repeat their own prompt: most of their tokens copied from it, in runs of `REPEAT_RUN`.

A model that restates the question instead of answering it (`59 + 63 =`) can still be paid by a reward that
evaluates expressions, and it runs to the token budget while it does; this is the tokenizer-level sign of it.
Token ids, not text: no tokenizer-specific normalisation, and the same definition for every policy. The
prompt's ids are taken as the model saw them, chat-template tokens included, so a completion that starts a
new turn of the template (`<|im_start|>user ...`) counts as a repeat too: it is also not an answer.
"""

from __future__ import annotations

import torch

from twinkle_exp.sampling.generate import RolloutBatch

# Six tokens: the question's arithmetic restated is that long in SmolLM2's tokenizer (`59 + 63` is
# `5`,`9`,` +`,` `,`6`,`3`), the hack of issue 21 that a run of 8 would miss.
REPEAT_RUN = 6
# The share of a completion's tokens (its closing EOS aside) that copied runs must cover. A right answer that
# restates the sum before giving it (`59 + 63 = 122`: 6 of 11 tokens copied) stays below it, the restatement
# alone (`59 + 63 =`: 6 of 7) does not; a worked answer that quotes its question (GSM8K) stays below it too.
REPEAT_SHARE = 2 / 3


def repeats_prompt(
    prompt_ids: torch.Tensor,  # [N, P] left-padded prompt ids
    prompt_mask: torch.Tensor,  # [N, P] 1 on the prompt's tokens (one contiguous span per row)
    completion_ids: torch.Tensor,  # [N, C] right-padded completion ids
    completion_mask: torch.Tensor,  # [N, C] 1 on the completion's tokens (one contiguous span per row)
    min_run: int = REPEAT_RUN,
    ends_with_eos: torch.Tensor | None = None,  # [N] bool: the row's last scored token is EOS, not counted
    min_share: float = REPEAT_SHARE,
) -> torch.Tensor:  # [N] bool on the CPU
    """Per row: do runs of `min_run` consecutive token ids that also occur, in that order and consecutively,
    in the row's own prompt cover at least `min_share` of the completion's tokens? Exact (sets of id tuples,
    no hashing); a rollout's rows share their group's prompt, so each distinct prompt's runs are collected
    once."""
    if min_run < 1:
        raise ValueError(f"min_run must be at least 1, got {min_run}")
    n = prompt_ids.shape[0]
    out = torch.zeros(n, dtype=torch.bool)
    if prompt_ids.shape[1] < min_run or completion_ids.shape[1] < min_run:
        return out  # no row can hold a run that long
    rows = [t.detach().cpu().tolist() for t in (prompt_ids, prompt_mask, completion_ids, completion_mask)]
    eos = [False] * n if ends_with_eos is None else ends_with_eos.detach().cpu().tolist()
    runs_of: dict[tuple[int, ...], set[tuple[int, ...]]] = {}
    for i, (p_ids, p_mask, c_ids, c_mask) in enumerate(zip(*rows, strict=True)):
        prompt = tuple(t for t, m in zip(p_ids, p_mask, strict=True) if m)
        completion = [t for t, m in zip(c_ids, c_mask, strict=True) if m]
        completion = completion[:-1] if eos[i] else completion
        if prompt not in runs_of:
            runs_of[prompt] = {prompt[j : j + min_run] for j in range(len(prompt) - min_run + 1)}
        runs, covered = runs_of[prompt], [False] * len(completion)
        for j in range(len(completion) - min_run + 1):
            if tuple(completion[j : j + min_run]) in runs:
                covered[j : j + min_run] = [True] * min_run
        out[i] = bool(completion) and sum(covered) >= min_share * len(completion)
    return out


def rollout_repeats_prompt(rollout: RolloutBatch, min_run: int = REPEAT_RUN) -> torch.Tensor:
    """`[N]` bool: `repeats_prompt` of each row of a rollout, its scored completion tokens (a closing EOS
    aside: the rows not truncated end with one) against its prompt."""
    scored = rollout.completion_mask  # [N, P + C]; every row has at least its first token scored
    width = int(scored.any(0).long().argmax())  # P: the first column any row scores
    return repeats_prompt(
        rollout.input_ids[:, :width],
        rollout.attention_mask[:, :width],
        rollout.input_ids[:, width:],
        scored[:, width:],
        min_run,
        ends_with_eos=~rollout.truncated.cpu(),
    )
