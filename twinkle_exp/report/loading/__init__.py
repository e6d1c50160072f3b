"""Loading: a sweep's jobs and what each left on disk (run.json, Hydra's files, metrics.csv), grouped into
variants. Whatever cannot be read becomes one of the run's `problems`, never a silent gap."""
