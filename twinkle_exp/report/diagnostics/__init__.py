"""Diagnostics across runs: the traps that make a comparison of GRPO-family losses mislead, detected across
the runs of a sweep (`sweep`) and between variants (`variants`), on top of each run's own checks
(`twinkle_exp.summary.diagnostics.per_run`). A diagnosis names its evidence and what to change; it is not a
finding (a paper's claim, `report.findings`)."""
