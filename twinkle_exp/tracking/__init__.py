"""Tracking: loggers (metrics.csv always, wandb offline by default, Trackio when asked), progress, the
end-of-run summary, and `run_json`, the run directory's contract (run.json, job identity, override keys) that
the report reads."""
