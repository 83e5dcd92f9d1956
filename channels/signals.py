"""Signals channels send to the apps above it, which never import them back."""

import django.dispatch

# Routes changed without a model signal (status and limits are written with `update()`); the
# gateway drops its route cache on every process.
routes_changed = django.dispatch.Signal()

# The daily prune ran (`channels.tasks.prune_probe_results`, with `now`): apps above prune their own
# rows past retention in a receiver that returns {what: rows deleted}, merged into the task's result.
daily_prune = django.dispatch.Signal()
