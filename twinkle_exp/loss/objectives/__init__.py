"""The built-in objectives, one module per family; each loss in them registers itself (`loss.registry`).

A module added here is found by `registry.losses()` without being listed anywhere.
"""
