"""The child process of `real_step`: one fit of the preset, the tokens its update computed, the matmul and
sampler rates; see `real_step` for what is measured and how."""

from __future__ import annotations

import csv
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.flops import (
    Products,
    TokenCounts,
    matmul_params,
    matmul_rate,
    profiled_products,
    update_flops,
)
from twinkle_exp import metric_names as M

STAGES = (M.TIME_ROLLOUT, M.TIME_REFERENCE, M.TIME_UPDATE)
WARMUP_ROLLOUTS = 1
# The fit validates before its first rollout and after its last whatever val_every says (outside time/*):
# 8 problems instead of 128 keep that short.
PRESET = [
    "+experiment=smollm2_addition",
    "task.num_validation=8",
    "trainer.val_batch_size=8",
    "trainer.val_every=1000000",
    "trainer.samples_every=1000000",
]


def _build(full: bool, rollouts: int, extra: list[str]):
    """The preset's typed config and its PolicyModule, as a run builds them (no warm-start)."""
    from hydra import compose, initialize_config_module

    from twinkle_exp.config.checks import check_config
    from twinkle_exp.config.store import register_configs
    from twinkle_exp.training.from_config import policy_and_task, policy_module

    register_configs()
    overrides = [*PRESET, *(["policy.lora=null"] if full else []), *extra]
    with initialize_config_module(config_module="twinkle_exp.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    cfg.trainer.max_steps = rollouts * cfg.optim.mu * cfg.optim.num_minibatches
    typed = check_config(cfg)
    return typed, policy_module(typed, *policy_and_task(typed))


class _Counter:
    """Token positions of each rollout's update, by rollout index, counted as its passes run: the decoder's
    input columns (a forward pre-hook) and the labelled positions of the steps' rows (what the head scores)."""

    def __init__(self, module):
        import twinkle_exp.training.rl_step as module_file
        from twinkle_exp.logprobs import IGNORE_INDEX
        from twinkle_exp.models.backbone import unwrap_peft

        self.by_rollout: dict[int, TokenCounts] = {}
        self.calls: list[int] = []  # tokens of each decoder call with gradient
        self.on, self.module = False, module
        unwrap_peft(module.policy).get_decoder().register_forward_pre_hook(self._decoder, with_kwargs=True)
        update, recompute = module._update, module_file.recompute_old_logps

        def counted_update(plan):
            first = plan.next_step
            self.on = True
            try:
                update(plan)
            finally:
                self.on = False
            labelled = plan.rollout.labels != IGNORE_INDEX
            steps = plan.steps[first : plan.next_step]
            if module.optim_cfg.skip_zero_advantage:  # those rows never reach the head
                steps = [plan.rows_with_gradient(rows) for rows in steps]
            self.now().head += sum(int(labelled[rows].sum()) for rows in steps)

        def counted_recompute(policy, rollout, *args):  # inside time/update_s (rl_step.plan)
            self.on = True
            try:
                return recompute(policy, rollout, *args)
            finally:
                self.on = False
                self.now().head_no_grad += int((rollout.labels != IGNORE_INDEX).sum())

        module._update, module_file.recompute_old_logps = counted_update, counted_recompute

    def now(self) -> TokenCounts:
        return self.by_rollout.setdefault(self.module.rollouts_done, TokenCounts())

    def _decoder(self, _layer, args, kwargs):
        if self.on:
            ids = kwargs.get("input_ids", args[0] if args else None)
            if torch.is_grad_enabled():
                self.now().trunk += ids.numel()
                self.calls.append(ids.numel())
            else:
                self.now().trunk_no_grad += ids.numel()


def _fit(module, typed, out: str, profile: bool):  # -> the profile's (operators, operators by shape) or None
    from torch.utils.data import DataLoader

    from benchmarks.step import bare_trainer
    from twinkle_exp.tasks.prompt_stream import PromptStream

    trainer = bare_trainer(typed.trainer.max_steps, out)
    stream = PromptStream(module.task, typed.rollout.prompts_per_step, seed=typed.seed)
    table = None
    if profile:
        update = module._update

        def profiled(plan):
            nonlocal table
            cpu = [torch.profiler.ProfilerActivity.CPU]
            with torch.profiler.profile(activities=cpu, record_shapes=True) as prof:
                update(plan)
            table = prof.key_averages(), prof.key_averages(group_by_input_shape=True)

        module._update = profiled
    trainer.fit(module, DataLoader(stream, batch_size=None))
    for logger in trainer.loggers:
        logger.save()
    return table


def _products_table(events, vocab: int, rank: int | None, square: float) -> str:
    """The profiled update's matrix products by class, each at its own rate and as a share of `square`, the
    same process's 2048^3 rate: what the products reach at their shapes, before any time outside them."""
    classes = profiled_products(events, vocab, rank)
    total = Products(*(sum(getattr(c, f) for c in classes.values()) for f in ("flops", "seconds", "calls")))
    lines = ["matrix products (own time; the profiler's overhead is in it):"]
    for name, c in sorted([*classes.items(), ("all", total)], key=lambda kv: -kv[1].seconds):
        if c.seconds:
            rate = c.flops / c.seconds
            lines.append(
                f"  {name:9s} {c.calls:6d} calls {c.flops / 1e9:7.1f} GFLOP {c.seconds:6.2f} s "
                f"{rate / 1e9:6.1f} GFLOP/s = {rate / square:.1%} of 2048^3"
            )
    return "\n".join(lines)


class _NoEos:
    """A tokenizer without an end of sequence, so every row samples the whole budget."""

    eos_token_id = None

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def _sampler_rates(module, typed, iters: int) -> dict[str, float]:
    """Tokens/s of our `generate` and of transformers' `generate`, on the preset's first prompts."""
    from twinkle_exp.models import encode_prompt
    from twinkle_exp.models.backbone import unwrap_peft
    from twinkle_exp.sampling.generate import Decoding, SamplingOptions, generate, left_pad
    from twinkle_exp.tasks.prompt_stream import PromptStream

    r = typed.rollout
    prompts = next(iter(PromptStream(module.task, r.prompts_per_step, seed=typed.seed + 1)))["prompts"]
    # Ours samples from what a rollout samples from (the merged copy by default); transformers' from the policy.
    policy, tokenizer = module.policy.eval(), _NoEos(module.tokenizer)
    model = module.parts.sampler_copy(policy)
    unwrap_peft(policy).generation_config.eos_token_id = None
    options = SamplingOptions(
        max_new_tokens=r.max_new_tokens, group_size=r.group_size, temperature=r.temperature
    )
    decoding = Decoding.auto(model, torch.device("cpu"), r.cascade_attention)
    ids, mask = left_pad([encode_prompt(tokenizer, p) for p in prompts], tokenizer.pad_token_id, "cpu")

    def ours(seed: int) -> None:
        generate(
            model,
            tokenizer,
            prompts,
            options,
            generator=torch.Generator().manual_seed(seed),
            decoding=decoding,
        )

    def hf_generate(seed: int) -> None:
        torch.manual_seed(seed)  # generate draws from the global generator
        out = policy.generate(
            input_ids=ids,
            attention_mask=mask,
            do_sample=True,
            temperature=r.temperature,
            top_k=0,
            top_p=1.0,
            num_return_sequences=r.group_size,
            max_new_tokens=r.max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
        )
        assert out.shape[1] == ids.shape[1] + r.max_new_tokens, "generate stopped early"

    rates = {}
    with torch.no_grad():
        for name, sample in (("ours", ours), ("hf_generate", hf_generate)):
            sample(0)
            seconds = []
            for i in range(iters):
                start = time.perf_counter()
                sample(i + 1)
                seconds.append(time.perf_counter() - start)
            rates[name] = len(prompts) * r.group_size * r.max_new_tokens / statistics.median(seconds)
    return rates


def run_child(spec: dict) -> dict:
    """In the child: one fit, its figures per kept rollout, the matmul rates and the sampler's."""
    from twinkle_exp.models.backbone import output_head, unwrap_peft

    torch.set_num_threads(spec["threads"])
    typed, module = _build(spec["full"], spec["rollouts"], spec.get("overrides", []))
    if spec.get("compile"):
        for layer in unwrap_peft(module.policy).get_decoder().layers:
            layer.compile(dynamic=True)
    counter = _Counter(module)
    with tempfile.TemporaryDirectory() as out:
        profiled = _fit(module, typed, out, spec["profile"])
        with open(Path(out, "metrics.csv")) as f:
            rows = [r for r in csv.DictReader(f) if r.get(M.TIME_UPDATE)]
    base = unwrap_peft(module.policy)
    params = matmul_params(base.get_decoder(), output_head(module.policy))
    kept = []
    for row in rows[WARMUP_ROLLOUTS:] if len(rows) > WARMUP_ROLLOUTS else rows:
        counts = counter.by_rollout[int(float(row[M.ROLLOUT_INDEX]))]
        figures = {stage: float(row[stage]) for stage in STAGES}
        kept.append(figures | {"flops": update_flops(params, counts, spec["full"]), "tokens": vars(counts)})
    tokens = round(statistics.mean(counter.calls))  # an update forward's rows x columns, on average
    hidden, intermediate = base.config.hidden_size, base.config.intermediate_size
    square = matmul_rate(2048, 2048, 2048)
    table = None
    if profiled:
        operators, by_shape = profiled
        table = operators.table(sort_by="self_cpu_time_total", row_limit=30)
        adapters = getattr(module.policy, "peft_config", None)  # {name: LoraConfig} of a peft model
        rank = next(iter(adapters.values())).r if adapters else None
        table += "\n" + _products_table(by_shape, base.config.vocab_size, rank, square)
    return {
        "rollouts": kept,
        "params": vars(params),
        "threads": torch.get_num_threads(),
        "mlp_shape": [tokens, hidden, intermediate],
        "matmul": {"square": square, "mlp": matmul_rate(tokens, hidden, intermediate)},
        "sampler": _sampler_rates(module, typed, spec["sampler_iters"]) if spec["sampler_iters"] else {},
        "profile": table,
    }
