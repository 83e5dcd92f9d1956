"""Upstream channels, the public model catalog and its routes, and their health checks."""
