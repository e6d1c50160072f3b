"""Prompts wrapped in the tokenizer's chat template, for instruction-tuned models (`task.chat_template`)."""

from __future__ import annotations

from typing import Any

from twinkle_exp.models.hf import HFTokenizerAdapter


class ChatTemplateTokenizer(HFTokenizerAdapter):
    """An `HFTokenizerAdapter` whose prompts become a chat: an optional system turn, the prompt as the user's
    turn, then the assistant's header, so that sampling continues as the assistant.

    Only prompts change (through `encode_prompt`); completions, answers and the reward functions keep the
    raw text.
    """

    def __init__(self, tokenizer: Any, system_prompt: str | None = None):
        super().__init__(tokenizer)
        if not getattr(tokenizer, "chat_template", None):
            name = getattr(tokenizer, "name_or_path", type(tokenizer).__name__)
            raise ValueError(
                f"task.chat_template=true, but the tokenizer of {name!r} has no chat template; "
                f"use an instruction-tuned model or set task.chat_template=false"
            )
        self.system_prompt = system_prompt

    def render(self, prompt: str) -> str:
        """The prompt as the model reads it: the chat template's text, special tokens written out."""
        messages = [{"role": "user", "content": prompt}]
        if self.system_prompt is not None:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def encode_prompt(self, prompt: str) -> list[int]:
        # The template writes BOS itself where the model wants one: no special tokens added on top.
        return list(self.tokenizer.encode(self.render(prompt), add_special_tokens=False))


def with_chat_template(tokenizer: Any, system_prompt: str | None = None) -> ChatTemplateTokenizer:
    """`tokenizer` (an `HFTokenizerAdapter`) with its prompts wrapped in its chat template."""
    if not isinstance(tokenizer, HFTokenizerAdapter):
        raise ValueError(
            f"task.chat_template=true needs a Hugging Face tokenizer (policy=hf), got {type(tokenizer).__name__}"
        )
    return ChatTemplateTokenizer(tokenizer.tokenizer, system_prompt)
