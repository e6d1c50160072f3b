"""Diagnostic commands that build a run from its config and look inside its steps (`python -m
twinkle_exp.diagnose.<name>`)."""
