"""Signals of models on demand; `hosts.ondemand.tasks` connects the receivers that queue work."""

from django.dispatch import Signal

# After the commit that opened a cold start: `cold_start_id`. The receiver queues its placement.
placement_needed = Signal()
