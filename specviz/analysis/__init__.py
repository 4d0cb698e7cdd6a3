"""What the numbers mean: the readings of a run, Leviathan et al.'s theory, the draft scorecard, step timings, hardware what-ifs."""
