"""Drafting strategies: the drafters and the registry that names them (the one place a drafter is named)."""
