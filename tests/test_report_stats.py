"""The report's verdicts on synthetic sweeps with a known truth: the family's false-"different" rate, power
against a shifted variant, equivalence inside and outside the margin, pairing by provenance, steps to a
threshold some runs never reach, and runs of mixed provenance refused. In process (`compare_all`, the
function the report calls) for the many-sweep rates, and through `python -m twinkle_exp.report` for the rest.
Seeded: every run gives the same figures."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from stats_simulation import SIGMA

from twinkle_exp import metric_names as M
from twinkle_exp.report.__main__ import main
from twinkle_exp.report.findings.__main__ import main as findings_main
from twinkle_exp.report.loading.runs import Run
from twinkle_exp.report.statistics.aggregate import AUC, DEFAULT_SCORES, FINAL_ACCURACY, VariantStats
from twinkle_exp.report.statistics.comparisons import compare_all
from twinkle_exp.report.statistics.verdicts import DIFFERENT, EQUIVALENT, INCONCLUSIVE

VARIANTS, SEEDS = 6, 5
COMMIT = "0" * 40


def variant_stats(scores: np.ndarray, paired: bool = False) -> list[VariantStats]:
    """VariantStats of `scores` `[variants, seeds, 2]` (AUC, final accuracy), as `summarize` makes them;
    `paired`: the runs at each seed record the same provenance (`provenance`), as one sweep's do."""
    out = []
    for i, per_seed in enumerate(scores):
        runs = [
            Run(
                Path("."),
                f"v{i}/{s}",
                [],
                "finished",
                seed=s,
                run_json={"provenance": provenance(seed=s)} if paired else {},
            )
            for s in range(len(per_seed))
        ]
        values = {AUC.name: per_seed[:, 0].tolist(), FINAL_ACCURACY.name: per_seed[:, 1].tolist()}
        scored = {name: runs for name in values}
        out.append(VariantStats(f"v{i}", runs, len(runs), values, scored, len(runs), [], []))
    return out


def sweep_scores(rng: np.random.Generator, shift: float = 0.0, seeds: int = SEEDS) -> np.ndarray:
    """`[6, seeds, 2]` scores around 60%: per-seed sd SIGMA (2 points), AUC and final accuracy correlated 0.7
    within a run; variant 5 better by `shift` on both."""
    cov = SIGMA**2 * np.array([[1.0, 0.7], [0.7, 1.0]])
    scores = 0.6 + rng.multivariate_normal([0.0, 0.0], cov, (VARIANTS, seeds))
    scores[5] += shift
    return scores


def test_identical_variants_get_a_false_different_in_at_most_5_percent_of_sweeps() -> None:
    """200 sweeps of 6 identical variants x 5 seeds, 15 pairs x 2 scores = 30 tests each, Holm: before
    issue 29 the report called at least one pair "higher" in half of such sweeps."""
    rng = np.random.default_rng(29)
    sweeps, with_false = 200, 0
    for _ in range(sweeps):
        c = compare_all(variant_stats(sweep_scores(rng)), DEFAULT_SCORES)
        assert c.family.size == 30
        with_false += any(v.verdict == DIFFERENT for v in c.verdicts)
    # Measured: 6 of 200 sweeps (3.0%), 9 false calls in 6000 tests; at a true 5% the binomial sd over 200
    # sweeps is 1.5%.
    assert with_false / sweeps <= 0.05


def test_a_shifted_variant_is_called_different_at_the_stated_power() -> None:
    """One variant better by 4 sd (8 points at SIGMA = 2). At 5 seeds a side under Holm over 30 tests the
    exact permutation test cannot reach the level (its floor 2 / C(10, 5) = 0.0079 > 0.05 / 30), so no pair
    is called and every row says the seeds cannot decide; at 10 seeds (AUC alone, 15 tests) its pair with
    each other variant is called "different", in its favour, at least 80% of the time."""
    rng = np.random.default_rng(7)
    c = compare_all(variant_stats(sweep_scores(rng, shift=4.0 * SIGMA)), DEFAULT_SCORES)
    v5 = [v for v in c.of(AUC) if "v5" in (v.first, v.second)]
    assert all(v.verdict != DIFFERENT and not v.decidable for v in c.verdicts)
    assert sum(v.p_adjusted < 0.05 for v in v5) >= 3  # the t alone would have called them
    called = total = 0
    for _ in range(30):
        c = compare_all(variant_stats(sweep_scores(rng, shift=4.0 * SIGMA, seeds=10)), (AUC,))
        for v in c.of(AUC):
            if "v5" in (v.first, v.second):
                total += 1
                called += v.verdict == DIFFERENT and v.first == "v5"
    assert called / total >= 0.8


def test_equivalence_inside_and_outside_the_margin() -> None:
    """Two variants, 10 seeds, sd 0.5 points: 0.3 points apart is equivalent within the default 2; 3 points
    apart is not (different); with a 0.1-point margin the first pair is inconclusive."""
    rng = np.random.default_rng(3)
    base = 0.6 + 0.005 * rng.standard_normal((2, 10, 2))
    near, far = base.copy(), base.copy()
    near[1] += 0.003
    far[1] += 0.03
    [v] = compare_all(variant_stats(near[:, :, :]), (AUC,)).verdicts
    assert v.verdict == EQUIVALENT and v.margin == 0.02 and v.p_equivalence_adjusted < 0.05
    [v] = compare_all(variant_stats(far), (AUC,)).verdicts
    assert v.verdict == DIFFERENT and v.first == "v1"
    [v] = compare_all(variant_stats(near), (AUC,), margins={"AUC": 0.001}).verdicts
    assert v.verdict == INCONCLUSIVE and v.seeds_needed > 10


# --- through the command line -------------------------------------------------------------------------------


def provenance(commit: str = COMMIT, seed: int = 0, threads: int = 2) -> dict:
    return {
        "commit": commit,
        "dirty": False,
        "versions": {"python": "3.12"},
        "threads": {
            "torch": threads,
            "torch_interop": threads,
            "OMP_NUM_THREADS": None,
            "MKL_NUM_THREADS": None,
        },
        "blas": "open",
        "cpu": "Test CPU (x86_64)",
        "accelerator": "cpu",
        "warm_start_key": "w" * 16,
        "reference_digest": "r" * 16,
        "seed_fixes": {"prompt_stream": seed, "sampler_stream": seed, "warm_start": "warmup.seed=0"},
    }


def write_run(
    sweep: Path,
    variant: str,
    seed: int,
    curve: list[tuple[int, float]],
    record: dict | None = None,
    key: str = "val/accuracy",
) -> None:
    """A finished job as the trainer leaves it: overrides, run.json (with `record` as its provenance),
    and a metrics.csv holding the validation curve."""
    job = sweep / f"{variant}/seed={seed}"
    (job / ".hydra").mkdir(parents=True)
    overrides = [f"loss={variant}", f"seed={seed}"]
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    info = {"status": "finished", "overrides": overrides, "seed": seed, "wall_time_s": 1.0}
    if record is not None:
        info["provenance"] = record
    (job / "run.json").write_text(json.dumps(info))
    rows = "".join(f"{step},{value}\n" for step, value in curve)
    (job / "metrics.csv").write_text(f"step,{key}\n" + rows)


def write_sweep(root: Path, scores: np.ndarray, paired: bool = True) -> Path:
    """Runs whose curves go from 0.3 at step 0 to `final` at step 10 with AUC `auc`: a two-point curve's
    AUC is its mean, so (0, 2 auc - final), (10, final) gives both scores exactly."""
    for i, per_seed in enumerate(scores):
        for seed, (auc, final) in enumerate(per_seed):
            record = provenance(seed=seed) if paired else None
            write_run(root, f"v{i}", seed, [(0, 2 * auc - final), (10, final)], record)
    return root


def verdict_rows(out: Path) -> list[dict]:
    return list(csv.DictReader((out / "verdicts.csv").open()))


def test_cli_sweeps_of_identical_variants_match_the_in_process_verdicts(tmp_path: Path) -> None:
    """A handful of null sweeps through the command line (paired: their runs share seed_fixes), whose
    verdicts.csv agrees with `compare_all` on the same scores: the 200-sweep rate above is the CLI's."""
    rng = np.random.default_rng(11)
    sweeps_with_a_call = 0
    for k in range(3):
        scores = sweep_scores(rng)
        sweep = write_sweep(tmp_path / f"sweep{k}", scores)
        assert main([str(sweep)]) == 0
        rows = verdict_rows(sweep / "report")
        assert len(rows) == 30 and {r["test"] for r in rows} == {"paired t"}
        expected = compare_all(variant_stats(scores, paired=True), DEFAULT_SCORES).verdicts
        assert [r["verdict"] for r in rows] == [v.verdict for v in expected]
        sweeps_with_a_call += any(r["verdict"] == DIFFERENT for r in rows)
        assert [float(r["p_adjusted"]) for r in rows] == pytest.approx(
            [v.p_adjusted for v in expected], abs=1e-9
        )
    assert sweeps_with_a_call <= 1  # seeded: sweep 1 of these 3 has one (paired t, final accuracy)
    text = (sweep / "report" / "report.md").read_text()
    assert "15 pairs x 2 scores = 30 tests, Holm" in text and "Paired" in text and "30 of 30 tests" in text


def test_pairing_narrows_the_comparison_when_seeds_share_their_randomness(tmp_path: Path) -> None:
    """A per-seed component shared by both variants (sd 5 points) and a 1-point difference: paired (the runs
    record the same seed_fixes), the per-seed differences show it; unpaired (no provenance), Welch cannot."""
    rng = np.random.default_rng(5)
    shared = 0.05 * rng.standard_normal((1, 8, 1))
    scores = 0.6 + shared + 0.002 * rng.standard_normal((2, 8, 2))
    scores[0] += 0.01
    width = {}
    for paired, test, verdict in ((True, "paired t", DIFFERENT), (False, "Welch t", INCONCLUSIVE)):
        sweep = write_sweep(tmp_path / test.replace(" ", "_"), scores, paired=paired)
        assert main([str(sweep)]) == 0  # no provenance at all is allowed (with a warning), not mixed
        auc = verdict_rows(sweep / "report")[0]
        assert (auc["test"], auc["verdict"]) == (test, verdict)
        width[test] = float(auc["high"]) - float(auc["low"])
    # The shared component is noise to Welch and cancels in the per-seed differences.
    assert width["paired t"] < 0.1 * width["Welch t"]


def test_steps_to_threshold_count_the_runs_that_never_reach_it(tmp_path: Path) -> None:
    """fast: 1 of 3 runs reaches 50% at step 40, the others never (followed to step 160); steady: 3 of 3 at
    step 80. Averaging only the runs that got there put fast ahead (40 vs 80); the restricted mean counts
    every run: (40 + 160 + 160) / 3 = 120 vs 80, with how many reached it."""
    sweep = tmp_path / "sweep"
    for seed in range(3):
        reach = seed == 0
        write_run(sweep, "fast", seed, [(0, 0.2), (40, 0.6 if reach else 0.3), (160, 0.6 if reach else 0.4)])
        write_run(sweep, "steady", seed, [(0, 0.2), (40, 0.4), (80, 0.55), (160, 0.6)])
    assert main([str(sweep)]) == 0
    text = (sweep / "report" / "report.md").read_text()
    rows = {
        line.split(" | ")[0].strip("| "): line.split(" | ")
        for line in text.splitlines()
        if line.startswith("| loss=")
    }
    assert rows["loss=fast"][6].startswith("120.0 [") and "(1/3 by step 160)" in rows["loss=fast"][6]
    assert rows["loss=steady"][6] == "80.0 (3/3 by step 160)"  # every run at 80: no spread, no interval
    steps = json.loads((sweep / "report" / "verdicts.json").read_text())["steps_to_threshold"]
    assert [(s["variant"], s["fraction_reached"]) for s in steps] == [
        ("loss=fast", 1 / 3),
        ("loss=steady", 1.0),
    ]


def test_validation_spacing_does_not_change_the_auc(tmp_path: Path) -> None:
    """One curve, validated every 20 steps in one variant and every 40 in the other: the AUC on the shared
    grid differs by interpolation error only (a smooth curve: well under 0.5 points), not by the spacing."""
    sweep = tmp_path / "sweep"
    curve = lambda t: 0.3 + 0.5 * (1 - np.exp(-t / 60))  # noqa: E731
    for seed in range(3):
        for variant, every in (("every20", 20), ("every40", 40)):
            write_run(
                sweep, variant, seed, [(t, float(curve(t) + 0.001 * seed)) for t in range(0, 161, every)]
            )
    assert main([str(sweep), "--out", str(tmp_path / "out")]) == 0
    [auc, _] = verdict_rows(tmp_path / "out")
    assert abs(float(auc["effect"])) < 0.005


def test_runs_of_two_commits_are_refused_in_one_line_unless_allowed(tmp_path: Path, capsys) -> None:
    sweep = tmp_path / "sweep"
    for seed in range(3):
        write_run(sweep, "a", seed, [(0, 0.3), (10, 0.5 + 0.01 * seed)], provenance(COMMIT, seed))
        write_run(sweep, "b", seed, [(0, 0.3), (10, 0.5 + 0.01 * seed)], provenance("1" * 40, seed))
    assert main([str(sweep)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "commit differs (0000000000 in 3 runs, 1111111111 in 3 runs)" in err
    assert "--allow-mixed-provenance" in err and not (sweep / "report").exists()
    assert main([str(sweep), "--allow-mixed-provenance"]) == 0
    text = (sweep / "report" / "report.md").read_text()
    assert "⚠ compared although their provenance differs (commit; --allow-mixed-provenance)" in text
    assert "| 3 | 0000000000 | False | torch 2, interop 2, OMP –, MKL – | Test CPU (x86_64) | cpu |" in text


def test_two_thread_counts_are_refused_too(tmp_path: Path, capsys) -> None:
    sweep = tmp_path / "sweep"
    for seed in range(2):
        write_run(sweep, "a", seed, [(0, 0.3), (10, 0.5)], provenance(seed=seed, threads=1))
        write_run(sweep, "b", seed, [(0, 0.3), (10, 0.5)], provenance(seed=seed, threads=2))
    assert main([str(sweep)]) == 2
    assert "threads differs" in capsys.readouterr().err


def test_adjust_and_margin_options(tmp_path: Path, capsys) -> None:
    sweep = write_sweep(tmp_path / "sweep", sweep_scores(np.random.default_rng(1))[:3])
    assert main([str(sweep), "--adjust", "bh", "--margin", "AUC=0.05"]) == 0
    text = (sweep / "report" / "report.md").read_text()
    assert "3 pairs x 2 scores = 6 tests, Benjamini-Hochberg" in text and "AUC ±5.0 pp" in text
    rows = verdict_rows(sweep / "report")
    assert {r["adjustment"] for r in rows} == {"bh"} and rows[0]["margin"] == "0.05"
    assert main([str(sweep), "--margin", "AUCC=0.05"]) == 2
    assert "--margin AUCC=0.05: no such score in this report" in capsys.readouterr().err
    assert main([str(sweep), "--margin", "AUC=-1"]) == 2


def test_the_findings_command_speaks_the_new_vocabulary(tmp_path: Path, capsys) -> None:
    """drgrpo_length through `python -m twinkle_exp.report.findings`: GRPO's wrong answers grow by 4 tokens,
    Dr.GRPO's do not: "different" (the paper's direction), a single test, not adjusted."""
    sweep = tmp_path / "sweep"
    rng = np.random.default_rng(0)
    for seed in range(10):  # at 5 paired seeds the sign-flip test cannot go below 0.0625: no call
        for loss, growth in (("grpo", 4.0), ("drgrpo", 0.0)):
            values = 10 + growth * np.linspace(0, 1, 40) + rng.normal(0, 0.3, 40)
            curve = [(4 * i, float(v)) for i, v in enumerate(values)]
            write_run(sweep, loss, seed, curve, provenance(seed=seed), key=M.COMPLETION_LENGTH_INCORRECT)
    assert findings_main([str(sweep), "--finding", "drgrpo_length"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("drgrpo_length: different: difference ")
    page = (sweep / "findings" / "findings.md").read_text()
    assert "### drgrpo_length: different" in page and "paired t interval" in page
    assert "a single pre-declared primary test, not adjusted" in page
    for old in ("reproduced", "bootstrap", "permutation p"):
        assert old not in page
