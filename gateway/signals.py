"""Invalidate the gateway's per-process caches when keys, users, teams, models, routes or channels change.

Saves and deletes arrive as Django's model signals; changes written with `update()` (health
checks moving a channel's status) arrive as `channels.signals.routes_changed`.

In this process the snapshot is dropped at once; other processes learn of it through the Redis
generations (`gw:gen:keys`, `gw:gen:routes`) set to a new value after the transaction commits, which
every admission script compares with the one the process's caches were built from (see `gateway.cache`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save

from portal import propagation

from .cache import generation_keys, new_generation, snapshot

if TYPE_CHECKING:
    import redis

logger = logging.getLogger(__name__)

_client: redis.Redis | None = None
_client_lock = threading.Lock()


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        with _client_lock:
            if _client is None:
                import redis

                _client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    return _client


def bump(*, keys: bool = False, routes: bool = False) -> None:
    """Drop this process's snapshot now and tell other processes after the commit."""
    snapshot.invalidate(keys=keys, routes=routes)

    def publish() -> None:
        # Again after the commit: a request may have cached the old row in between.
        snapshot.invalidate(keys=keys, routes=routes)
        if not _publish(keys, routes):
            # The request that made the change says it is not confirmed yet (portal.propagation).
            for what, changed in (("keys", keys), ("routes", routes)):
                if changed:
                    propagation.unconfirmed(what)
            _retry_in_background(keys, routes)

    transaction.on_commit(publish)


RETRY_FOR_SECONDS = 60.0


def _publish(keys: bool, routes: bool) -> bool:
    try:
        gen_keys, gen_routes = generation_keys()
        pipe = _redis().pipeline(transaction=False)
        if keys:
            pipe.set(gen_keys, new_generation())
        if routes:
            pipe.set(gen_routes, new_generation())
        pipe.execute()
        return True
    except Exception as exc:
        logger.warning("could not publish a cache generation to Redis (%r); retrying", exc)
        return False


def _retry_in_background(keys: bool, routes: bool) -> None:
    """Keep trying until Redis takes the bump (a revocation must reach every replica); replicas
    also drop cached keys after GATEWAY_KEY_TTL, so even a bump that never lands ends in seconds."""

    def retry() -> None:
        deadline = time.monotonic() + RETRY_FOR_SECONDS
        delay = 0.2
        while time.monotonic() < deadline:
            time.sleep(delay)
            if _publish(keys, routes):
                logger.info("cache generation published after a retry")
                return
            delay = min(delay * 2, 2.0)
        logger.error("gave up publishing a cache generation after %g s", RETRY_FOR_SECONDS)

    threading.Thread(target=retry, name="gateway-generation-retry", daemon=True).start()


def _keys_changed(sender: object, **kwargs: object) -> None:
    bump(keys=True)


def _routes_changed(sender: object, **kwargs: object) -> None:
    bump(routes=True)


def _model_deleted(sender: object, **kwargs: object) -> None:
    # The cascade deletes its rows in the keys', users' and teams' allowed_models with no m2m_changed.
    bump(keys=True, routes=True)


def _user_changed(sender: object, update_fields: Iterable[str] | None = None, **kwargs: object) -> None:
    # Logins save last_login only: nothing the gateway caches.
    if update_fields is not None and set(update_fields) <= {"last_login"}:
        return
    bump(keys=True)


def connect() -> None:
    from django.contrib.auth import get_user_model

    from accounts.models import Team
    from channels.models import AliasTarget, Channel, Model, ModelRoute, RoutePrice
    from channels.signals import routes_changed
    from keys.models import Budget, Key, PayloadLogging

    user = get_user_model()
    for keyed in (Key, PayloadLogging, Budget):
        post_save.connect(_keys_changed, sender=keyed, dispatch_uid=f"gw-keys-save-{keyed.__name__}")
        post_delete.connect(_keys_changed, sender=keyed, dispatch_uid=f"gw-keys-del-{keyed.__name__}")
    post_save.connect(_user_changed, sender=user, dispatch_uid="gw-user-save")
    post_delete.connect(_keys_changed, sender=user, dispatch_uid="gw-user-del")
    m2m_changed.connect(_keys_changed, sender=Key.allowed_models.through, dispatch_uid="gw-key-models")
    m2m_changed.connect(_keys_changed, sender=user.allowed_models.through, dispatch_uid="gw-user-models")
    post_save.connect(_keys_changed, sender=Team, dispatch_uid="gw-keys-save-Team")
    post_delete.connect(_keys_changed, sender=Team, dispatch_uid="gw-keys-del-Team")
    m2m_changed.connect(_keys_changed, sender=Team.allowed_models.through, dispatch_uid="gw-team-models")
    for model in (Channel, Model, ModelRoute, AliasTarget, RoutePrice):
        post_save.connect(_routes_changed, sender=model, dispatch_uid=f"gw-routes-save-{model.__name__}")
        if model is not Model:
            post_delete.connect(_routes_changed, sender=model, dispatch_uid=f"gw-routes-del-{model.__name__}")
    post_delete.connect(_model_deleted, sender=Model, dispatch_uid="gw-routes-del-Model")
    routes_changed.connect(_routes_changed, dispatch_uid="gw-routes-changed")
    from hosts.models import Deployment  # an on-demand deployment lists its model while stopped

    post_save.connect(_routes_changed, sender=Deployment, dispatch_uid="gw-routes-save-Deployment")
    post_delete.connect(_routes_changed, sender=Deployment, dispatch_uid="gw-routes-del-Deployment")
