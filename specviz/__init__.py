"""specviz: speculative decoding, run for real."""
