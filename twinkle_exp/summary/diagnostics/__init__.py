"""The traps that make a run of a GRPO-family loss mislead, detected in its own metrics and config
(`per_run`). A diagnosis names its evidence and what to change; the analysis's checks across runs
(`twinkle_exp.report.diagnostics`) build on these."""
