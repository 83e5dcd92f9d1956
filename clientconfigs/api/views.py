"""REST endpoints: list clients, render a client's files (placeholder), mint a key with its files,
issue a download token, and trade a token for the installer bundle."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from keys.models import Key
from portal.api.serializers import drf_error
from portal.api.throttling import AnonThrottle

from .. import clients, services
from ..clients.base import Rendered, RenderInput
from ..installer.messages import lang_query
from ..models import KeyMode

if TYPE_CHECKING:
    from portal.permissions import AuthenticatedRequest

from .serializers import (
    ClientSummarySerializer,
    DownloadTokenSerializer,
    MintSerializer,
    RedeemSerializer,
    RenderQuerySerializer,
)


def client_summary(module: ModuleType) -> dict[str, Any]:
    return {"slug": module.SLUG, "label": module.LABEL, "env_indirection": module.ENV_INDIRECTION}


def rendered_data(inp: RenderInput, rendered: Rendered) -> dict[str, Any]:
    return {
        "version": inp.version,
        "gateway": inp.gateway_url,
        "models": [
            {"name": m.name, "context_window": m.context_window, "max_output_tokens": m.max_output_tokens}
            for m in inp.models
        ],
        "files": [
            {
                "name": f.name,
                "path": f.path,
                "macos_path": f.macos_path or f.path,
                "windows_path": f.windows,
                "windows_path_unconfirmed": f.windows_unconfirmed,
                "format": f.format,
                "merge": f.merge,
                "secret": f.secret,
                "note": f.note,
                "content": f.content,
            }
            for f in rendered.files
        ],
        "commands": [{"label": c.label, "text": c.text} for c in rendered.commands],
        "links": [{"label": link.label, "url": link.url} for link in rendered.links],
        "notes": rendered.notes,
        "warnings": rendered.warnings,
    }


class ClientViewSet(viewsets.ViewSet):
    """The supported clients. Everything rendered here is for the requesting user only."""

    request: AuthenticatedRequest
    lookup_field = "slug"
    lookup_value_regex = "[a-z0-9-]+"

    def _module(self, slug: str | None) -> ModuleType:
        module = clients.get(slug or "")
        if module is None:
            raise Http404
        return module

    def _own_key(self, key_id: int | None) -> Key | None:
        if key_id is None:
            return None
        key = Key.objects.not_revoked().filter(pk=key_id, owner_id=self.request.user.pk).first()
        if key is None:
            raise Http404
        return key

    def _check_model(self, name: str, key: Key | None) -> None:
        """A default model the caller (with `key`) may not use is a 400 on `model`."""
        try:
            services.check_default_model(self.request.user, name, key)
        except DjangoValidationError as exc:
            raise drf_error(exc) from None

    @extend_schema(responses={200: ClientSummarySerializer(many=True)}, operation_id="client_configs_clients_list")
    def list(self, request: Request) -> Response:
        return Response([client_summary(m) for m in clients.CLIENTS.values()])

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def retrieve(self, request: AuthenticatedRequest, slug: str | None = None) -> Response:
        return Response(client_summary(self._module(slug)))

    @extend_schema(
        parameters=[
            OpenApiParameter("key", int, description="List only the models this key of yours may use."),
            OpenApiParameter("model", str, description="Default model."),
        ],
        responses={200: OpenApiTypes.OBJECT},
    )
    @action(detail=True, methods=["get"])
    def files(self, request: AuthenticatedRequest, slug: str | None = None) -> Response:
        """The client's files with a placeholder (or env var) for the key."""
        module = self._module(slug)
        query = RenderQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        key = self._own_key(query.validated_data.get("key"))
        self._check_model(query.validated_data.get("model", ""), key)
        inp = services.render_input(
            request.user,
            gateway=services.gateway_url(request),
            key=key,
            default_model=query.validated_data.get("model", ""),
        )
        services.record_download(request.user, module.SLUG, inp.version, key, via="api")
        return Response(rendered_data(inp, module.render(inp)))

    @extend_schema(request=MintSerializer, responses={201: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post"])
    def mint(self, request: AuthenticatedRequest, slug: str | None = None) -> Response:
        """Mint a key for this client and return the files with it inside. Shown once."""
        module = self._module(slug)
        body = MintSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        machine, replace = body.validated_data.get("machine", ""), body.validated_data["replace"]
        # The key minted takes over the models of the one it replaces.
        replaced = services.replaceable_key(request.user, module.SLUG, machine) if replace else None
        self._check_model(body.validated_data.get("model", ""), replaced)
        key, plaintext = services.mint_key(request.user, module.SLUG, machine, replace=replace)
        inp = services.render_input(
            request.user,
            gateway=services.gateway_url(request),
            key=key,
            plaintext=plaintext,
            default_model=body.validated_data.get("model", ""),
        )
        services.record_download(request.user, module.SLUG, inp.version, key, via="api")
        data = rendered_data(inp, module.render(inp))
        data["key"] = {"id": key.pk, "name": key.name, "masked": key.masked, "plaintext": plaintext}
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=DownloadTokenSerializer, responses={201: OpenApiTypes.OBJECT})
    @action(detail=True, methods=["post"], url_path="download-tokens")
    def download_tokens(self, request: AuthenticatedRequest, slug: str | None = None) -> Response:
        """A single-use, 10-minute token and the one-line installer commands that use it."""
        module = self._module(slug)
        body = DownloadTokenSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        mode = body.validated_data["key_mode"]
        key = self._own_key(body.validated_data.get("key")) if mode == KeyMode.PLACEHOLDER else None
        if mode == KeyMode.PLACEHOLDER:
            scope = key
        else:  # the key the installer mints takes over the models of the one it replaces
            machine, replace = body.validated_data.get("machine", ""), body.validated_data["replace"]
            scope = services.replaceable_key(request.user, module.SLUG, machine) if replace else None
        self._check_model(body.validated_data.get("model", ""), scope)
        token, plaintext = services.issue_download_token(
            request.user,
            module.SLUG,
            key_mode=mode,
            key=key,
            key_name=body.validated_data.get("machine", ""),
            default_model=body.validated_data.get("model", ""),
            replace_key=body.validated_data["replace"],
        )
        gateway = services.gateway_url(request)
        sh, ps1 = f"{gateway}/connect/install.sh{lang_query()}", f"{gateway}/connect/install.ps1{lang_query()}"
        return Response(
            {
                "token": plaintext,
                "expires_at": token.expires_at,
                "key_mode": mode,
                "install_sh": f"curl -fsSL {sh} | sh -s -- {plaintext}",
                "install_ps1": f"& ([scriptblock]::Create((irm {ps1}))) -Token {plaintext}",
                "check_sh": f"curl -fsSL {sh} | sh -s -- --check {module.SLUG}",
            },
            status=status.HTTP_201_CREATED,
        )


class RedeemThrottle(AnonThrottle):
    """Fails open like every API throttle (portal.faults): never block the installer on the throttle itself."""

    rate = "30/minute"


class BundleView(APIView):
    """Trade a download token for the installer bundle. The token is the credential: one use, 10 minutes."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    throttle_classes = [RedeemThrottle]

    @extend_schema(request=RedeemSerializer, responses={200: OpenApiTypes.OBJECT, 404: OpenApiTypes.OBJECT})
    def post(self, request: Request) -> Response:
        body = RedeemSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        bundle = services.redeem_download_token(body.validated_data["token"], gateway=services.gateway_url(request))
        if bundle is None:
            return Response(
                {"detail": "Unknown, used or expired download token. Get a new installer command from the portal."},
                status=status.HTTP_404_NOT_FOUND,
            )
        return Response(bundle)
