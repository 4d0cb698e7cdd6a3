"""Reproducible training of the bundled Python code-completion pair (see `python -m specviz.train`)."""
