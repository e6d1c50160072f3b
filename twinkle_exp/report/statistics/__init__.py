"""Statistics of a comparison over seeds: one run's series to a number, per-variant estimates with their
intervals, pairwise comparisons and tests, and the steps-to-threshold ratios."""
