"""Gateway Portal: the Django project (settings, accounts, audit log, shared helpers)."""

from .celery import app as celery_app

__all__ = ["celery_app"]
