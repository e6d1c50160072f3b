"""Diagnostics: the traps that make a comparison of GRPO-family losses mislead, detected in a run's metrics
and config (`per_run`), across the runs of a sweep (`sweep`) and between variants (`variants`). A
diagnosis names its evidence and what to change; it is not a finding (a paper's claim, `report.findings`)."""
