"""The playground page, its credential and the record of each call it made."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST
from django.views.generic import TemplateView

from channels.models import Channel
from keys.models import UsageRecord
from keys.usage.api.serializers import UsageRecordSerializer
from portal.forms import pk_from
from portal.permissions import is_admin
from portal.public import public_url

from . import credential
from .services import playground_key


def _texts() -> dict[str, str]:
    """What the script shows, translated here (the page has no JavaScript catalog)."""
    return {
        "you": _("You"),
        "assistant": _("Assistant"),
        "send": _("Send"),
        "stop": _("Stop"),
        "thinking": _("Waiting for the first token…"),
        "no_models": _("No model is available to you right now."),
        "pick_model": _("Choose a model first."),
        "error": _("Error"),
        "http_status": _("HTTP status"),
        "upstream_status": _("Upstream status"),
        "channel": _("Channel"),
        "replica": _("Gateway replica"),
        "ttft": _("Time to first token"),
        "speed": _("Tokens per second"),
        "prompt": _("Prompt tokens"),
        "completion": _("Completion tokens"),
        "cached": _("Cached tokens"),
        "estimated": _("estimated"),
        "request_id": _("Request id"),
        "routing": _("Routing explanation"),
        "record_pending": _("The usage record is not written yet."),
        "pass": _("pass"),
        "fail": _("fail"),
        "text": _("Text"),
        "stream": _("Streaming"),
        "tool_call": _("Tool call"),
        "no_tool_call": _("The model answered without calling the tool."),
        "no_text": _("The answer has no text."),
        "checking": _("Checking…"),
        "copied": _("Copied"),
        "credential_failed": _("The playground could not get a credential. Reload the page or sign in again."),
        "image_attached": _("Image attached: {name}"),
        "compare_pick": _("Choose two or three models to compare."),
        "key_placeholder": _("YOUR_KEY"),
        "error_other": _("The request failed; the detail below, from the gateway or the model's server, says why."),
    }


def _error_texts() -> dict[str, str]:
    """What a gateway error means, in the reader's language, by the error's `code` (else its
    `type`, e.g. an Anthropic error event's): the script shows it above the gateway's own English
    text, which stays as the detail. `network` and `aborted` are the script's own (no answer); an
    error without a meaning here (an upstream's own 4xx, passed through) shows `error_other`."""
    meanings = {
        _("A rate limit of your key, your account or your team is reached. Wait a little and send again."): [
            "rate_limit_exceeded",
            "rate_limit_error",
        ],
        _("A token or request quota of your key, your account or your team is used up for now."): ["quota_exceeded"],
        _(
            "This request asks for more tokens than a limit of yours allows at all: "
            "lower Max tokens or shorten the conversation."
        ): ["request_too_large"],
        _("The message is too large for the gateway: attach a smaller image or shorten the conversation."): [
            "body_too_large"
        ],
        _("A spending budget of your key, your account or your team is used up."): ["budget_exceeded"],
        _("This model has no price yet and a budget applies to you: an admin must price it first."): [
            "model_not_priced"
        ],
        _("The conversation is too long for this model's context window: clear it, shorten it or lower Max tokens."): [
            "context_length_exceeded"
        ],
        _("This model does not exist or is not available to you: reload the page for the current list."): [
            "model_not_found",
            "not_found_error",
        ],
        _("Your key may not use this model."): ["model_not_allowed", "permission_error"],
        _("Your key may not be used from this computer's network address."): ["ip_not_allowed"],
        _("This is an embedding model: choose a chat model."): ["model_not_supported"],
        _(
            "This model's server cannot take this request (an image, a tool or a setting it was not started "
            "for): remove it and send again, or choose another model."
        ): ["unsupported_by_upstream"],
        _("The model's server does not serve this model; an admin must check the channel's routes."): [
            "upstream_not_found"
        ],
        _("Your key uses local channels only, and no local channel serves this model."): ["local_only"],
        _("No channel can serve this model right now. Try again later or choose another model."): [
            "no_channel",
            "channel_not_serving",
        ],
        _("The model is starting on its GPU host; send again in a minute."): ["model_starting", "model_downloading"],
        _("The model could not be started; an admin can see why on its deployment page."): ["model_start_failed"],
        _("The upstream did not answer in time."): ["upstream_timeout", "timeout_error"],
        _("The upstream is overloaded or limiting its requests; send again in a moment."): [
            "upstream_overloaded",
            "upstream_rate_limited",
            "overloaded_error",
        ],
        _("The upstream refused the channel's credentials; an admin must fix the channel's API key."): [
            "upstream_auth_failed"
        ],
        _("The upstream failed to answer this request."): [
            "upstream_error",
            "upstream_connect",
            "upstream_truncated",
            "upstream_invalid_response",
            "upstream_protocol",
            "upstream_too_large",
            "upstream_not_streamed",
            "api_error",
        ],
        _("The gateway is briefly unavailable; send again in a moment."): [
            "limiter_unavailable",
            "database_unavailable",
            "shutdown",
            "configuration_changing",
            "service_unavailable",
            "server_error",
            "internal",
        ],
        _("The playground's credential no longer works: reload the page or sign in again."): [
            "invalid_playground_credential",
            "missing_playground_credential",
            "key_revoked",
            "key_expired",
            "account_disabled",
            "authentication_error",
        ],
        _("The gateway refused a value of this request: check the settings above."): [
            "invalid_value",
            "invalid_request",
            "invalid_json",
            "invalid_request_error",
        ],
        _("The gateway could not be reached: check your connection and send again."): ["network"],
        _("Stopped before the answer was complete."): ["aborted"],
    }
    return {code: text for text, codes in meanings.items() for code in codes}


class PlaygroundView(LoginRequiredMixin, TemplateView):
    """Chat with any model the user may use, compare models, check surfaces, copy the request."""

    template_name = "keys/playground.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        user = self.request.user
        key = playground_key(user)  # type: ignore[arg-type]
        admin = is_admin(user)
        channel = None
        channel_pk = pk_from(self.request.GET.get("channel", ""))
        if admin and channel_pk is not None:
            channel = Channel.objects.filter(pk=channel_pk).first()
        context.update(
            key=key,
            key_url=reverse("key_detail", args=[key.pk]),
            channel=channel,
            config={
                "credential_url": reverse("playground_credential"),
                "record_url": reverse("playground_record", args=["REQUEST_ID"]),
                "gateway_url": public_url(self.request) + "/v1",
                "is_admin": admin,
                "model": self.request.GET.get("model", "")[:128],
                "channel": {
                    "id": channel.pk,
                    "name": channel.name,
                    "models": sorted(r.model.name for r in channel.routes.select_related("model")),
                }
                if channel is not None
                else None,
                "refresh_seconds": max(30, credential.lifetime() - 60),
                "texts": _texts(),
                "errors": _error_texts(),
            },
        )
        return context


@login_required
@require_POST
def issue_credential(request: HttpRequest) -> HttpResponse:
    """Set the playground cookie for this session (POST with the CSRF token; the page calls it on
    load and before the credential expires). The answer carries no secret."""
    key = playground_key(request.user)  # type: ignore[arg-type]
    session_key = request.session.session_key
    if not session_key:
        return JsonResponse({"detail": _("Sign in again to use the playground.")}, status=403)
    value = credential.mint(user_id=key.owner_id, key_id=key.pk, session_key=session_key)
    response = JsonResponse({"expires_in": credential.lifetime(), "key": key.shown_name, "local_only": key.local_only})
    response.set_cookie(
        credential.COOKIE,
        value,
        max_age=credential.lifetime(),
        path=credential.COOKIE_PATH,
        secure=request.is_secure() or settings.SESSION_COOKIE_SECURE,
        httponly=True,
        samesite="Strict",
    )
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_GET
def call_record(request: HttpRequest, request_id: str) -> HttpResponse:
    """The usage record of one of this user's own calls, by the gateway's `x-request-id` (404 until
    the usage writer has stored it: 202 with `pending`, which the page polls). Channel and routing
    explanation only for admins."""
    record = (
        UsageRecord.objects.select_related("key", "user", "channel")
        .filter(user_id=int(request.user.pk or 0), request_id=request_id[:64])
        .first()
    )
    if record is None:
        return JsonResponse({"pending": True, "detail": _("The usage record is not written yet.")}, status=202)
    return JsonResponse(UsageRecordSerializer(record, context={"request": request}).data)
