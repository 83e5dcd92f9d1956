"""Signals for the apps above accounts (ARCHITECTURE.md: a lower app never imports an upper one)."""

from django.dispatch import Signal

# Sent after a deactivated user is active again, with `user`, `restore_keys` (what the admin chose)
# and `actor`. The keys app revokes the user's old keys unless `restore_keys` is true.
user_reactivated = Signal()

# Sent after a user left the team whose leads managed them (moved to another team or to none, or
# given a role no lead manages: `User.managing_team_id`), with `user` and `team` (the team they
# left). Those leads no longer answer for them: the keys app drops what they locked on their keys.
left_lead = Signal()
