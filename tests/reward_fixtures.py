"""Reward functions for the CLI tests, importable by `_target_` (the tests directory is on PYTHONPATH)."""


def nan_reward(prompts: list[str], completions: list[str], answers: list[str]) -> list[float]:
    """A broken reward: NaN for every completion."""
    return [float("nan")] * len(completions)
