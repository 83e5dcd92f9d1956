"""Gateway Portal's ground floor: settings, urls, asgi, celery, secrets, env, shared UI/API helpers.

It imports no app; `urls.py`, `api/urls.py` and `asgi.py` are where the apps are put together.
"""

from .celery import app as celery_app

__all__ = ["celery_app"]
