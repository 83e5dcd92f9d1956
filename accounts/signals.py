"""Signals for the apps above accounts (ARCHITECTURE.md: a lower app never imports an upper one)."""

from django.dispatch import Signal

# Sent after a deactivated user is active again, with `user`, `restore_keys` (what the admin chose)
# and `actor`. The keys app revokes the user's old keys unless `restore_keys` is true.
user_reactivated = Signal()
