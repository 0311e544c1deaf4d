"""What a learner at a laptop uses around a check: progress and hints, the doctor, and watch mode."""
