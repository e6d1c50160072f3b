"""Diagnostic commands that build a run from its config and look inside its steps (`python -m
diagnose.<name>`)."""
