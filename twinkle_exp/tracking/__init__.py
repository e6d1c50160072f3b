"""Tracking: loggers (metrics.csv always, wandb offline by default, Trackio when asked), progress, and
`run_json`, the run directory's contract (run.json, job identity, override keys) that the report reads."""
