"""policy=hf options: gradient checkpointing (same gradients, fewer saved activations), the attention
implementation, and chat-template prompts (task.chat_template)."""

from __future__ import annotations

import pytest
import torch

from twinkle_exp.models import CharTokenizer, encode_prompt
from twinkle_exp.models.chat import ChatTemplateTokenizer, with_chat_template
from twinkle_exp.models.hf import set_update_mode
from twinkle_exp.models.lora import LoraSettings
from twinkle_exp.policy.build import hf_policy, with_task_prompt_format
from twinkle_exp.policy.logprobs import sequence_logps
from twinkle_exp.tasks import AdditionTask

# A minimal template in the usual shape: turns in order, then the assistant's header to continue from.
TEMPLATE = (
    "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}[assistant]{% endif %}"
)


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def grads_and_saved(tiny_hf_dir, *, checkpointing: bool, lora: LoraSettings | None, dropout: bool = True):
    """Gradients of a log-prob sum, and how many tensors the forward saved for backward.

    `dropout=False` is the trainer's default update: eval mode, with checkpointing kept on.
    """
    torch.manual_seed(0)  # peft draws the adapters' A matrices: the same in both models
    model = hf_policy(str(tiny_hf_dir), gradient_checkpointing=checkpointing, lora=lora).model
    set_update_mode(model, dropout=dropout)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 99, (3, 10), generator=g)  # [B, T]
    mask = torch.ones_like(ids)
    positions = torch.arange(10).expand(3, 10)
    labels = ids.clone()
    labels[:, :4] = -100
    saved = 0

    def count(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += 1
        return t

    with torch.autograd.graph.saved_tensors_hooks(count, lambda t: t):
        logps, _ = sequence_logps(model, ids, mask, positions, labels)
    logps.sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return grads, saved


@pytest.mark.parametrize("dropout", [True, False], ids=["train_mode", "update_without_dropout"])
@pytest.mark.parametrize("lora", [None, LoraSettings(r=4, alpha=8.0)], ids=["full", "lora"])
def test_gradient_checkpointing_gives_the_same_gradients(tiny_hf_dir, lora, dropout):
    plain, saved_plain = grads_and_saved(tiny_hf_dir, checkpointing=False, lora=lora, dropout=dropout)
    checkpointed, saved_checkpointed = grads_and_saved(
        tiny_hf_dir, checkpointing=True, lora=lora, dropout=dropout
    )
    assert saved_checkpointed < saved_plain  # the layers' activations were dropped, so it did checkpoint
    assert plain.keys() == checkpointed.keys() and plain
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=1e-5, atol=1e-7, msg=name)
    assert any(g.abs().sum() > 0 for g in plain.values())


def test_attn_implementation_reaches_the_model(tiny_hf_dir):
    for implementation in ("eager", "sdpa"):
        model = hf_policy(str(tiny_hf_dir), attn_implementation=implementation).model
        assert model.config._attn_implementation == implementation


def test_chat_template_wraps_prompts_everywhere_they_are_encoded(tiny_hf_dir):
    tokenizer = hf_policy(str(tiny_hf_dir)).tokenizer
    tokenizer.tokenizer.chat_template = TEMPLATE
    chat = with_chat_template(tokenizer, system_prompt="Be brief.")
    assert chat.render("1+2=") == "[system]Be brief.[user]1+2=[assistant]"
    # The one encoding path (sampling, validation, warm-start) follows the template; no BOS on top of it.
    assert encode_prompt(chat, "1+2=") == tokenizer.encode("[system]Be brief.[user]1+2=[assistant]")
    assert encode_prompt(tokenizer, "1+2=") == [tokenizer.bos_token_id, *tokenizer.encode("1+2=")]
    assert with_chat_template(tokenizer).render("x") == "[user]x[assistant]"
    assert chat.decode(chat.encode("abc")) == "abc" and chat.eos_token_id == tokenizer.eos_token_id


def test_the_task_decides_whether_prompts_are_chats(tiny_hf_dir):
    policy = hf_policy(str(tiny_hf_dir))
    policy.tokenizer.tokenizer.chat_template = TEMPLATE
    task = AdditionTask(num_validation=4)
    assert with_task_prompt_format(policy, task) is policy  # chat_template defaults to off
    task.chat_template, task.system_prompt = True, "Add."
    wrapped = with_task_prompt_format(policy, task).tokenizer
    assert isinstance(wrapped, ChatTemplateTokenizer) and wrapped.render("1+2=").startswith("[system]Add.")


def test_chat_template_needs_a_template_and_an_hf_tokenizer(tiny_hf_dir):
    tokenizer = hf_policy(str(tiny_hf_dir)).tokenizer
    tokenizer.tokenizer.chat_template = None
    with pytest.raises(
        ValueError, match="task.chat_template=true, but the tokenizer .* has no chat template"
    ):
        with_chat_template(tokenizer)
    with pytest.raises(ValueError, match="needs a Hugging Face tokenizer .*CharTokenizer"):
        with_chat_template(CharTokenizer())


def test_gradient_checkpointing_is_refused_for_a_model_without_it():
    from twinkle_exp.models import TinyCausalLM, enable_gradient_checkpointing

    with pytest.raises(ValueError, match="policy.gradient_checkpointing: TinyCausalLM"):
        enable_gradient_checkpointing(
            TinyCausalLM(10, d_model=8, n_layers=1, n_heads=2, max_seq_len=8, dropout=0.0)
        )
