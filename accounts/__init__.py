"""People: users and roles, personal API tokens, the audit log, and the login and account pages."""
