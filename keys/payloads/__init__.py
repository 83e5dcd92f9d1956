"""Request logs: the opt-in, redacted and compressed bodies of gateway requests (see `PayloadLogging`)."""
