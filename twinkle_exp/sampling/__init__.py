"""Sampling: `generate` draws a group of completions per prompt with their log-probs; cascade attention."""
