"""Signals of models on demand; `hosts.ondemand.tasks` connects the receivers that queue work."""

from django.dispatch import Signal

# After the commit that opened a cold start: `cold_start_id`, and `here` when its placement should
# run in this process (a pinned deployment). The receiver queues it or starts it.
placement_needed = Signal()
