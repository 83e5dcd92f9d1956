"""Usage pages and reports: what developers and admins see of the records the gateway writes."""
