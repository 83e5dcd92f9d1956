"""Signals channels send to the apps above it, which never import them back."""

import django.dispatch

# Routes changed without a model signal (status and limits are written with `update()`); the
# gateway drops its route cache on every process.
routes_changed = django.dispatch.Signal()
