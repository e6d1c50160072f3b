"""The policy: building a model and its tokenizer, sequence log-probs, shared prompt prefixes, the reference."""

from twinkle_exp.policy.build import POLICIES, Policy, hf_policy, tiny_policy, with_task_prompt_format
from twinkle_exp.policy.logprobs import sequence_logps

__all__ = ["POLICIES", "Policy", "hf_policy", "sequence_logps", "tiny_policy", "with_task_prompt_format"]
