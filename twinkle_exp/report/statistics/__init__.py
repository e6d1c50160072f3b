"""Statistics of a comparison over seeds: one run's series to a number, per-variant estimates, intervals,
tests, multiplicity, equivalence, power, steps to threshold and verdicts, and the report's family of pairs."""
