"""Generated configs and one-line installers for the coding clients, bound to the team gateway."""
