"""Record what each data-parallel rank trained on, from a Hydra callback, for `dp_replay` to replay.

A 2-rank run and a 1-process run cannot draw the same global batch by themselves: every rank samples its
own prompts and completions from its own seeded streams. So the multi-process run records, on every rank,
the prompts and the rollout it trained on, the averaged gradient of its first optimizer step, the weights
before and after that step and the prompts its greedy validation decoded.

The recording wraps `PolicyModule` methods and `twinkle_exp.training.evaluation.generate` from a Hydra callback
(`+hydra.callbacks.capture._target_=dp_capture.CaptureCallback`), so it needs no test hook in the code
and records a run of any commit the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from hydra.experimental.callback import Callback

CAPTURE_DIR = "capture"  # under the job's output directory: rank<r>.pt per rank

# (object, attribute name, new value): monkeypatch.setattr, or a plain setattr in a subprocess.
Patch = Callable[[Any, str, Any], None]


def _full(t: torch.Tensor) -> torch.Tensor:
    """A full CPU copy of a plain tensor or of a sharded DTensor (a collective: every rank calls it)."""
    from torch.distributed.tensor import DTensor

    if isinstance(t, DTensor):
        t = t.full_tensor()
    return t.detach().cpu().clone()


def _rank() -> int:
    dist = torch.distributed
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _cpu(batch: Any) -> dict[str, Any]:
    return {k: v.detach().cpu() if torch.is_tensor(v) else v for k, v in vars(batch).items()}


class Recorder:
    """Wraps the trainer's stages to record, on this rank, what the first rollout and update saw."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {"rank": 0, "batches": [], "rollouts": [], "val_prompts": []}

    def install(self, patch: Patch) -> None:
        import twinkle_exp.training.evaluation as evaluation
        from twinkle_exp.training.module import PolicyModule

        data = self.data
        step, rollout = PolicyModule.training_step, PolicyModule._rollout
        update, before_step = PolicyModule._update, PolicyModule.on_before_optimizer_step
        generate = evaluation.generate

        def training_step(module, batch, batch_idx):
            data["rank"] = _rank()
            data["batches"].append({"prompts": list(batch["prompts"]), "answers": list(batch["answers"])})
            return step(module, batch, batch_idx)

        def _rollout(module, prompts):
            out = rollout(module, prompts)
            data["rollouts"].append(_cpu(out))
            return out

        def _update(module, *args, **kwargs):
            if "before" not in data:
                data["before"] = {k: _full(v) for k, v in module.policy.state_dict().items()}
            update(module, *args, **kwargs)
            if "after" not in data:
                data["after"] = {k: _full(v) for k, v in module.policy.state_dict().items()}

        def on_before_optimizer_step(module, optimizer):
            if "grads" not in data:  # the averaged gradient of the first step, before clipping
                data["grads"] = {n: _full(p.grad) for n, p in module.policy.named_parameters()}
            return before_step(module, optimizer)

        def greedy_generate(model, tokenizer, prompts, options, **kwargs):
            if options.greedy:
                data["val_prompts"].extend(prompts)
            return generate(model, tokenizer, prompts, options, **kwargs)

        patch(PolicyModule, "training_step", training_step)
        patch(PolicyModule, "_rollout", _rollout)
        patch(PolicyModule, "_update", _update)
        patch(PolicyModule, "on_before_optimizer_step", on_before_optimizer_step)
        patch(evaluation, "generate", greedy_generate)


class CaptureCallback(Callback):
    """Hydra callback: record every rank of every job into `<job output dir>/capture/rank<r>.pt`."""

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        self.recorder = Recorder()
        self.recorder.install(setattr)

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.hydra_config import HydraConfig

        out = Path(HydraConfig.get().runtime.output_dir) / CAPTURE_DIR
        out.mkdir(parents=True, exist_ok=True)
        torch.save(self.recorder.data, out / f"rank{self.recorder.data['rank']}.pt")


def load_captures(job_dir: Path) -> list[dict[str, Any]]:
    """Every rank's record of the job in `job_dir`, in rank order."""
    paths = sorted((job_dir / CAPTURE_DIR).glob("rank*.pt"), key=lambda p: int(p.stem[4:]))
    return [torch.load(p, weights_only=False) for p in paths]
