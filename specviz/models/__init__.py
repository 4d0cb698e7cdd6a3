"""Draft/target pairs: the catalogue (models.yaml), loading a pair, and the process-wide cache of loaded pairs."""
