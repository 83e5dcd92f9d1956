"""One cold start of an on-demand deployment: asked by the gateway, placed, launched, ready."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils.translation import gettext_lazy as _

from portal import i18n
from portal.models import TimeStampedModel


class ColdStartState(models.TextChoices):
    """placing → launching → ready | failed; placing → waiting_room | downloading → placing
    (retried) → … → failed.

    The gateway opens one in `placing` (`services.demand`); the placement task moves it to
    `launching` when it chose a host and asked for the launch job (or to `waiting_room` while no
    host has room and nothing idle may be evicted, or to `downloading` while the chosen host
    downloads the llama.cpp model's file, retrying until the budget is spent); the launch job's
    outcome moves it to `ready` or `failed` (`services.observe`).
    """

    PLACING = "placing", _("Placing")
    WAITING_ROOM = "waiting_room", _("Waiting for room")
    DOWNLOADING = "downloading", _("Downloading the weights")
    LAUNCHING = "launching", _("Launching")
    READY = "ready", _("Ready")
    FAILED = "failed", _("Failed")


ACTIVE_COLD_START_STATES = (
    ColdStartState.PLACING,
    ColdStartState.WAITING_ROOM,
    ColdStartState.DOWNLOADING,
    ColdStartState.LAUNCHING,
)


class ColdStartQuerySet(models.QuerySet[Any]):
    def active(self) -> ColdStartQuerySet:
        return self.filter(state__in=ACTIVE_COLD_START_STATES)


class ColdStart(TimeStampedModel):
    """A start of an on-demand deployment triggered by a request. At most one is active per
    deployment (named constraint): that is how concurrent first requests on every gateway replica
    trigger ONE launch. `reasons` says why the placement went where it did (one line per host, as
    the routing explanations do; each a `Message.as_item`, shown by `reasons_text` in the reader's
    language; rows from before hold plain English strings); `evicted` names the deployments stopped
    to make room; `download` is the weights' download onto the chosen host it waits for; `seconds`
    is request → healthy, the history the gateway's estimates come from."""

    objects = ColdStartQuerySet.as_manager()

    deployment = models.ForeignKey("hosts.Deployment", on_delete=models.CASCADE, related_name="cold_starts")
    state = models.CharField(max_length=16, choices=ColdStartState, default=ColdStartState.PLACING)
    message = models.CharField(max_length=500, blank=True)
    message_code = i18n.code_field()
    message_params = i18n.params_field()
    message_text = i18n.TranslatedText("message")
    host_name = models.CharField(max_length=100, blank=True)
    reasons = models.JSONField(default=list, blank=True)
    evicted = models.JSONField(default=list, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    deadline = models.DateTimeField(help_text="When the waiting requests give up (the cold-start budget).")
    finished = models.DateTimeField(null=True, blank=True)
    seconds = models.FloatField(null=True, blank=True)
    # The download of the model's file onto the chosen host that this start waits for (or waited for).
    download = models.ForeignKey(
        "hosts.ModelDownload", null=True, blank=True, on_delete=models.SET_NULL, related_name="cold_starts"
    )

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["deployment"],
                condition=models.Q(state__in=ACTIVE_COLD_START_STATES),
                name="coldstart_one_active_per_deployment",
            )
        ]

    def __str__(self) -> str:
        return f"cold start of {self.deployment_id} #{self.pk}"

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_COLD_START_STATES

    @property
    def reasons_text(self) -> list[str]:
        """`reasons` in the reader's language (each a `Message.as_item`; older rows: plain English)."""
        return i18n.rendered_items(self.reasons)

    @property
    def reasons_english(self) -> list[str]:
        return i18n.english_items(self.reasons)
