"""One run's end-of-run summary: its figures (final accuracy, area under the accuracy curve, steps to a
threshold), the traps the per-run diagnostics find in its metrics, and the table printed at the end.

The trainer's side of what the analysis (`twinkle_exp.report`) also reads: torch-, scipy- and
matplotlib-free, so a run never imports the analysis's dependencies."""
