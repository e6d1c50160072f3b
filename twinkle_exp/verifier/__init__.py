"""Answer checking in worker processes, each check with a hard time limit.

Kept apart from `twinkle_exp.rewards` (which imports torch) so that a worker process imports only what a
check needs.
"""
