"""Comparison report of a sweep: plots and a per-variant table from the files each job left on disk.

Run as `python -m twinkle_exp.report <sweep_dir>` or `twinkle-report <sweep_dir>`; it needs neither wandb
nor the network, only each job's run.json, .hydra/overrides.yaml and metrics.csv.
"""
