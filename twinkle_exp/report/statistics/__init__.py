"""Statistics of a comparison over seeds: intervals, tests, multiplicity, equivalence, power and verdicts."""
