"""The "Connect your tools" page: pick a client and how the key is handled, get the files, the
one-line installers and the doctor."""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods

from keys.budgets.services import budgets_for
from keys.models import Key
from keys.payloads.services import logged_keys

from . import clients, installer, services
from .forms import ConnectForm
from .installer.messages import lang_query, language_of
from .models import KeyMode

if TYPE_CHECKING:
    from accounts.models import User
    from portal.permissions import AuthenticatedHttpRequest

DEFAULT_CLIENT = "cline"


def _client_or_404(slug: str) -> ModuleType:
    module = clients.get(slug)
    if module is None:
        raise Http404("Unknown client.")
    return module


def _own_key(user: User, key_id: str | None) -> Key | None:
    if not key_id:
        return None
    try:
        pk = int(key_id)
    except (TypeError, ValueError):
        raise Http404("Unknown key.") from None
    return get_object_or_404(Key.objects.not_revoked(), pk=pk, owner=user)


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def connect(request: AuthenticatedHttpRequest) -> HttpResponse:
    """GET shows placeholder files; POST with action=mint mints a key and shows its files once;
    POST with action=installer issues a download token for the one-line installers."""
    slug = request.GET.get("client") or request.POST.get("client") or DEFAULT_CLIENT
    module = _client_or_404(slug)
    gateway = services.gateway_url(request)
    data = request.POST if request.method == "POST" else request.GET
    key = _own_key(request.user, data.get("key"))
    # The page shows the files of the key that will be written (a budget leaves out the models
    # without a price): a new key takes over the models and budgets of the one it replaces, else it
    # gets every model; the key picked under "Models of key" scopes a placeholder only.
    minting = (data.get("key_mode") or KeyMode.MINT) == KeyMode.MINT
    replacing = minting and (not data.get("key_mode") or bool(data.get("replace")))
    machine = (data.get("machine") or "").strip() or "laptop"  # as the form cleans it
    replaced = services.replaceable_key(request.user, slug, machine) if replacing else None
    scope = replaced if minting else key
    specs = services.model_specs(request.user, scope)
    form = ConnectForm(
        data if data.get("key_mode") else None,
        user=request.user,
        model_names=[s.name for s in specs],
        initial={"key": key.pk if key else None},
    )
    plaintext, minted, token, action = None, None, None, request.POST.get("action", "")
    default_model = ""
    if form.is_bound and form.is_valid():
        default_model = form.cleaned_data.get("model") or ""
    if request.method == "POST" and form.is_valid():
        replace = bool(form.cleaned_data.get("replace"))
        if action == "mint":
            minted, plaintext = services.mint_key(request.user, slug, machine, replace=replace)
            key = minted
        elif action == "installer":
            mode = form.cleaned_data["key_mode"]
            _, token = services.issue_download_token(
                request.user,
                slug,
                key_mode=mode,
                key=key if mode == KeyMode.PLACEHOLDER else None,
                key_name=machine,
                default_model=default_model,
                replace_key=replace,
            )
    inp = services.render_input(
        request.user, gateway=gateway, key=key if minted else scope, plaintext=plaintext, default_model=default_model
    )
    rendered = module.render(inp)
    if inp.primary is not None and not form.is_bound:
        form.fields["model"].initial = inp.primary.name
    if minted is not None:
        services.record_download(request.user, slug, inp.version, minted, via="page")
    context = {
        "clients": clients.CLIENTS,
        "client": module,
        "slug": slug,
        "form": form,
        "inp": inp,
        "rendered": rendered,
        "minted": minted,
        "plaintext": plaintext,
        "token": token,
        "token_mints": token is not None and form.cleaned_data.get("key_mode") == KeyMode.MINT,
        "gateway": gateway,
        "selected_key": key,
        "scope_key": scope,
        "stale": services.stale_downloads(request.user, gateway),
        "has_doctor": slug in installer.probes(),
        "replaceable": services.replaceable_key(request.user, slug, machine) if minted is None else None,
        "key_label": services.key_label(slug, machine),
        "env_var": clients.base.ENV_VAR,
        "lang_query": lang_query(),
        "logged_keys": logged_keys(request.user),
        "budgets": budgets_for(request.user),
    }
    return render(request, "clientconfigs/connect.html", context)


@never_cache
@login_required
@require_GET
def download(request: AuthenticatedHttpRequest, client: str, index: int) -> HttpResponse:
    """One placeholder file as an attachment (no key inside); counts as a download for staleness."""
    module = _client_or_404(client)
    key = _own_key(request.user, request.GET.get("key"))
    inp = services.render_input(
        request.user, gateway=services.gateway_url(request), key=key, default_model=request.GET.get("model", "")
    )
    files = module.render(inp).files
    if index >= len(files):
        raise Http404("No such file.")
    f = files[index]
    services.record_download(request.user, client, inp.version, key, via="page")
    filename = f.path.rsplit("/", 1)[-1]
    response = HttpResponse(f.content, content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_GET
def install_sh(request: HttpRequest) -> HttpResponse:
    """The installer itself holds no secret: the token on its command line selects the bundle. It
    prints in the language `?lang=` names (the Connect page adds the developer's), else the request's."""
    gateway = services.gateway_url(request)
    language = language_of(request.GET.get("lang"))
    script = installer.sh_script(gateway, gateway, language)
    return HttpResponse(script, content_type="text/x-shellscript; charset=utf-8")


@require_GET
def install_ps1(request: HttpRequest) -> HttpResponse:
    gateway = services.gateway_url(request)
    script = installer.ps1_script(gateway, gateway, language_of(request.GET.get("lang")))
    return HttpResponse(script, content_type="text/plain; charset=utf-8")
