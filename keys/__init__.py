"""Developer keys, their limits and the usage pages over what the gateway records."""
