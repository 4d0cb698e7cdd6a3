"""Draft/target pairs: the catalogue (models.yaml), loading a pair, its weight forms and feature heads."""
