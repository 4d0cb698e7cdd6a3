"""`python -m specviz distill`: collect the target's own answers, then distil a small draft on its probabilities."""
