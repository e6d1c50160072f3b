"""How a run starts, stops and resumes: checkpoints, resume rules, signals, stopping, the non-finite guard,
RNG state, and the run session that owns the run's status and every way it ends."""
