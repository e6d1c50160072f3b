"""Comparison report of one or more sweeps, and the end-of-run summary of a single run: interval estimates
over seeds, pairwise comparisons, diagnostics of the traps that make GRPO-family comparisons mislead, plots.

Run as `python -m twinkle_exp.report <dir> [<dir> ...]` or `twinkle-report`; it needs neither wandb nor the
network, only each job's run.json, .hydra/ files and metrics.csv. Its parts, in the order they run:
`loading`, `statistics`, `diagnostics`, `rendering` (and `findings`, papers' claims decided from a sweep).
"""
