"""What the numbers mean: measures of a run, Leviathan et al.'s theory, the draft scorecard, step timings, hardware what-ifs."""
