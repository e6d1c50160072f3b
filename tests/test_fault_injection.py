"""The fault-injection suite: a short run SIGKILLed at many points, each time started again with the same
command. Every time it continues and ends with the figures of an uninterrupted run, or refuses in one line;
no result file (run.json, metrics.csv, the checkpoint, the warm-start cache) is ever left unparsable, and a
finished run's files survive a kill of the command started again on it. It prints its tally."""

from __future__ import annotations

import random
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cli_run_helpers import metric_rows
from fault_injection import Attempt, Trigger, damaged_files, leftovers, run_once, time_phases

ARGS = [
    "debug=fast",
    "logger=csv",
    "trainer.save_checkpoint=true",
    "trainer.checkpoint_every=3",
    "trainer.max_steps=16",
]
SEED = 34
TARGET_FAULTS = 24
KILLS_PER_CHAIN = 6  # then the chain's last start runs to its end, to compare its figures
MAX_CHAINS = (
    16  # under load a drawn kill point lands after the run ended more often: more chains reach the target
)
FINISHED_RERUN_CHAINS = 2  # chains whose finished run is then started again, and killed


# Kill points at a file's appearance: (weight, the file, up to how many appearances to wait for).
FILE_EVENTS = {
    "checkpoint write": (3, "checkpoints/last.ckpt.tmp", 3),
    "metrics.csv rewrite": (2, "run/metrics.csv.tmp", 2),
    "run.json write": (2, "run/run.tmp", 2),
}
COLD_CACHE_EVENTS = {"warm-start cache write": (2, "cache/*.tmp", 1)}
LOCK_EVENT = {"warm-start cache lock taken": (1, "cache/*.lock", 1)}


def _draw(
    rng: random.Random, phases: tuple[float, float], cold_cache: bool, cache: Path, cache_only: bool = False
) -> Trigger:
    """One kill point: a random delay within a phase of the measured run, or a file event (`cache_only`: one
    of the warm-start cache's, when it is still to be written)."""
    to_status, to_end = phases
    delays = {  # (weight, anchor, the phase's length)
        "imports and start checks": (2, "start", to_status),
        "warm-start, steps and end": (4, "run.json", to_end - to_status),
    }
    events = dict(FILE_EVENTS)
    if cold_cache and not list(cache.glob("warmup-*.pt")):  # the events of a cache not written yet
        events |= COLD_CACHE_EVENTS | ({} if list(cache.glob("*.lock")) else LOCK_EVENT)
        if cache_only:
            delays, events = {}, {k: v for k, v in events.items() if k.startswith("warm-start cache")}
    weights = {label: spec[0] for label, spec in {**delays, **events}.items()}
    [label] = rng.choices(list(weights), weights=list(weights.values()))
    if label in delays:
        _, anchor, span = delays[label]
        return Trigger(label, anchor, rng.uniform(0, span))
    _, pattern, most = events[label]
    return Trigger(label, "file", pattern=pattern, nth=rng.randint(1, most))


def _files(run: Path) -> dict[str, bytes]:
    names = (
        "run.json",
        "metrics.csv",
        "checkpoints/last.ckpt",
        ".hydra/config.yaml",
        ".hydra/overrides.yaml",
    )
    return {name: (run / name).read_bytes() for name in names}


@dataclass
class Tally:
    kills: Counter = field(default_factory=Counter)  # kill point -> SIGKILLs
    not_reached: Counter = field(default_factory=Counter)  # kill point -> starts that ended before it
    after_kill: Counter = field(default_factory=Counter)  # how the start after a kill ended
    starts: int = 0
    chains: int = 0
    same_figures: int = 0
    unparsable: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # refusals, temporary files left behind

    @property
    def faults(self) -> int:
        return sum(self.kills.values())

    def summary(self, seconds: float, phases: tuple[float, float]) -> str:
        return (
            f"fault injection (seed {SEED}): {self.faults} SIGKILLs in {self.starts} starts of {self.chains} "
            f"chains, {seconds:.0f} s (a run: {phases[0]:.1f} s to run.json, {phases[1]:.1f} s in all)\n"
            f"  kill points: {dict(self.kills)}\n"
            f"  kill points the run ended before: {dict(self.not_reached)}\n"
            f"  the start after a kill: {dict(self.after_kill)}\n"
            f"  chains ending with the uninterrupted run's figures: {self.same_figures} of {self.chains}\n"
            f"  unparsable files: {len(self.unparsable)}; results lost or wrong: {len(self.lost)}\n"
            + "".join(f"  {note}\n" for note in self.notes)
        )


@dataclass
class Chain:
    """One run directory, killed up to KILLS_PER_CHAIN times, then run to its end."""

    root: Path
    cache: Path
    cold: bool
    env: dict

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def args(self) -> list[str]:
        return [*ARGS, f"hydra.run.dir={self.run}"]

    def start(self, trigger: Trigger | None, tally: Tally, after: str) -> Attempt:
        attempt = run_once(
            self.args, self.root, self.env, [self.run, self.run / "checkpoints", self.cache], trigger
        )
        tally.starts += 1
        where = f"{self.root.name}, after {after}"
        tally.unparsable += [f"{where}: {p}" for p in damaged_files(self.run, self.cache)]
        if trigger is not None:
            (tally.kills if attempt.killed else tally.not_reached)[trigger.label] += 1
        if attempt.outcome == "failed":
            tally.lost.append(f"{where}: failed: {attempt.stderr[-1500:]}")
        elif attempt.outcome == "refused":
            tally.notes.append(f"{where}: refused: {attempt.stderr.strip().splitlines()[-1]}")
        return attempt


def _kill_repeatedly(chain: Chain, rng: random.Random, phases, tally: Tally, expected) -> Attempt:
    after = "nothing"
    for kill in range(KILLS_PER_CHAIN + 1):
        more = kill < KILLS_PER_CHAIN and tally.faults < TARGET_FAULTS
        # A cold chain's first start is killed at its cache, so that every such chain hits one.
        trigger = _draw(rng, phases, chain.cold, chain.cache, cache_only=kill == 0) if more else None
        attempt = chain.start(trigger, tally, after)
        if after != "nothing":
            tally.after_kill["continued" if attempt.killed else attempt.outcome] += 1
        if not attempt.killed:
            break
        after = f"a kill at {trigger.label} ({trigger.anchor} +{trigger.after_s:.2f} s, #{trigger.nth})"
    if attempt.outcome == "finished":
        if metric_rows(chain.run) == expected:
            tally.same_figures += 1
        else:
            tally.lost.append(f"{chain.root.name}: its figures differ from the uninterrupted run's")
    return attempt


def _kill_a_rerun_of_the_finished_run(chain: Chain, rng: random.Random, phases, tally: Tally) -> None:
    """The same command on the finished run, killed during its start, then run to its end: nothing changes."""
    before = _files(chain.run)
    trigger = Trigger("re-run of a finished run", "start", rng.uniform(0, phases[0] * 1.2))
    for trig in (trigger, None):
        attempt = chain.start(trig, tally, "the run finished")
        after = _files(chain.run)
        if changed := sorted(name for name in before if after[name] != before[name]):
            tally.lost.append(f"{chain.root.name}: the finished run's {', '.join(changed)} changed ({trig})")
    if attempt.outcome != "finished":
        tally.lost.append(f"{chain.root.name}: the re-run of the finished run ended {attempt.outcome}")


@pytest.mark.slow
def test_a_run_killed_anywhere_continues_to_the_same_figures_or_refuses(tmp_path, cli_env, capsys):
    began = time.monotonic()
    warm_cache = tmp_path / "warm" / "cache"
    env = {**cli_env, "TWINKLE_CACHE": str(warm_cache)}
    reference = tmp_path / "reference" / "run"
    reference.parent.mkdir()
    time_phases([*ARGS, f"hydra.run.dir={reference}"], reference.parent, env, reference)  # fills the cache
    shutil.rmtree(reference)
    phases = time_phases([*ARGS, f"hydra.run.dir={reference}"], reference.parent, env, reference)
    expected = metric_rows(reference)

    rng, tally = random.Random(SEED), Tally()
    while tally.faults < TARGET_FAULTS and tally.chains < MAX_CHAINS:
        root = tmp_path / f"chain{tally.chains}"
        cold = tally.chains % 2 == 0  # every other chain trains and writes its own warm-start cache
        cache = root / "cache" if cold else warm_cache
        root.mkdir()
        chain = Chain(root, cache, cold, {**cli_env, "TWINKLE_CACHE": str(cache)})
        ended = _kill_repeatedly(chain, rng, phases, tally, expected)
        if ended.outcome == "finished" and tally.chains < FINISHED_RERUN_CHAINS:
            _kill_a_rerun_of_the_finished_run(chain, rng, phases, tally)
        left = leftovers(chain.run, cache)
        if left:
            tally.notes.append(f"{root.name}: temporary files left behind: {left}")
        tally.chains += 1

    with capsys.disabled():
        print("\n" + tally.summary(time.monotonic() - began, phases))
    assert not tally.unparsable, "\n".join(tally.unparsable)
    assert not tally.lost, "\n".join(tally.lost)
    assert tally.faults >= 20
