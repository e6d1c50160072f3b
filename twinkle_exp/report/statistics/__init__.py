"""Statistics of a comparison over seeds: one run's series to a number, per-variant estimates, intervals,
tests, multiplicity, equivalence, power and verdicts, and the steps-to-threshold ratios."""
