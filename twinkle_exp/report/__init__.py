"""Comparison report of one or more sweeps: interval estimates over seeds, pairwise comparisons, checks for the
traps that make GRPO-family comparisons mislead, plots; and the end-of-run summary of a single run.

Run as `python -m twinkle_exp.report <dir> [<dir> ...]` or `twinkle-report`; it needs neither wandb nor the
network, only each job's run.json, .hydra/ files and metrics.csv.
"""
