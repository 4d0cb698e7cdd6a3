"""Is speculation worth it for a deployment: per-token latency, memory, cold start, batch size, a verdict and a report."""
