"""Prompts: the built-in sets by domain, and the held-out standard-library code."""
