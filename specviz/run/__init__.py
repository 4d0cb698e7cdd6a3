"""The run pipeline: a loaded pair, a prompt and settings in; engine events and a recorded Trace out."""
