"""Channel and model pages (admin)."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views import View
from django.views.generic import DetailView

from portal import i18n
from portal.permissions import AdminRequiredMixin
from portal.ui import FilteredListView, ObjectDeleteView, ObjectFormView, add_validation_errors

from .choices import UnpricedPolicy
from .filters import ChannelFilterSet, ModelFilterSet
from .forms import (
    AddServedModelForm,
    AliasForm,
    BaseRouteFormSet,
    ChannelForm,
    ModelForm,
    RouteFormSet,
    RoutePriceForm,
    UnpricedPolicyForm,
)
from .health.history import attach_health
from .health.probe import ProbeFailure
from .health.services import served_models
from .models import Channel, Model, ModelRoute, RoutePrice
from .prices import currency
from .services import (
    add_served_model,
    check_model_deletable,
    clean_base_url,
    cold_windows,
    load_price_catalogue,
    model_states,
    priced_route_names,
    replace_routes,
    save_alias,
    set_route_price,
    set_unpriced_policy,
    suggest_public_name,
)


class BaseURLPreviewView(AdminRequiredMixin, View):
    """htmx: what the channel form will store for the base URL being typed, and why."""

    def get(self, request):
        raw = request.GET.get("base_url", "")
        if not raw.strip():
            return HttpResponse("")
        try:
            canonical, notes = clean_base_url(raw[:2000])
        except ValidationError as exc:
            return render(request, "channels/channel_base_url_preview.html", {"error": " ".join(exc.messages)})
        return render(request, "channels/channel_base_url_preview.html", {"canonical": canonical, "notes": notes})


class ChannelListView(AdminRequiredMixin, FilteredListView):
    model = Channel
    filterset_class = ChannelFilterSet
    template_name = "channels/channel_list.html"
    sort_fields = {
        "name": "name",
        "kind": "kind",
        "base_url": "base_url",
        "status": "status",
        "priority": "priority",
        "weight": "weight",
    }

    def get_base_queryset(self):
        return Channel.objects.prefetch_related("routes__model", "deployments__host")

    def get_context_data(self, **kwargs):
        context = super().get_context_data(filter_fields=["enabled"], **kwargs)
        context["object_list"] = attach_health(list(context["object_list"]))  # all badges in two queries
        return context


class ChannelEditView(AdminRequiredMixin, ObjectFormView):
    """Add (no pk) or edit a channel; the message says what was stored for the base URL, and why."""

    form_class = ChannelForm
    queryset = Channel.objects.all()
    template_name = "channels/channel_form.html"
    success, cancel = "channel_detail", "channel_list"
    title = (gettext_lazy("Add channel"), gettext_lazy("Edit channel"))
    button = (gettext_lazy("Add channel"), gettext_lazy("Save"))
    saved = (gettext_lazy("Channel %(name)s added."), gettext_lazy("Channel %(name)s saved."))

    def saved_message(self, obj: Channel, form: ChannelForm) -> str:
        text = super().saved_message(obj, form)
        if form.base_url_notes:
            notes = {"url": obj.base_url, "notes": "; ".join(form.base_url_notes)}
            text += " " + _("We stored %(url)s: %(notes)s.") % notes
        return text


class ChannelDetailView(AdminRequiredMixin, DetailView):
    model = Channel
    template_name = "channels/channel_detail.html"
    context_object_name = "channel"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["routes"] = self.object.routes.select_related("model").order_by("model__name")
        return context


def priced_routes_note(routes) -> dict[str, str]:
    """The confirmation's line of facts when some of the routes a delete takes along have prices:
    their price history goes with them."""
    priced = priced_route_names(routes)
    if not priced:
        return {}
    return {
        "about": _("These routes have prices; their price history is deleted with them: %(routes)s.")
        % {"routes": i18n.listing(priced)}
    }


class ChannelDeleteView(AdminRequiredMixin, ObjectDeleteView):
    queryset = Channel.objects.all()
    cancel, success = "channel_detail", "channel_list"
    title = gettext_lazy("Delete channel")
    question = gettext_lazy("Delete the channel %(name)s?")
    detail = gettext_lazy(
        "Its model routes are deleted too; requests for those models go to other channels or fail. "
        "Past usage records are kept."
    )
    button = gettext_lazy("Delete channel")
    deleted = gettext_lazy("Channel %(name)s deleted.")

    def texts(self, obj: Channel) -> dict[str, Any]:
        return {**super().texts(obj), **priced_routes_note(ModelRoute.objects.filter(channel=obj))}


class ChannelServedModelsView(AdminRequiredMixin, View):
    """ "Add models from this channel": what the upstream lists, each one click from a public model
    and its route, with the served context window prefilled."""

    template_name = "channels/channel_served_models.html"

    def get(self, request, pk, forms=None, status=200):
        channel = get_object_or_404(Channel, pk=pk)
        routed = {r.upstream_id: r for r in channel.routes.select_related("model")}
        rows, error = [], ""
        try:
            served = served_models(channel)
        except ProbeFailure as exc:
            served, error = {}, exc.message
        for index, (upstream_id, ctx) in enumerate(sorted(served.items())):
            form = (forms or {}).get(upstream_id) or AddServedModelForm(
                prefix=f"m{index}",
                initial={
                    "upstream_model": upstream_id,
                    "name": suggest_public_name(upstream_id),
                    "context_window": ctx,
                },
            )
            rows.append({"upstream_id": upstream_id, "context": ctx, "route": routed.get(upstream_id), "form": form})
        context = {"channel": channel, "rows": rows, "error": error}
        return render(request, self.template_name, context, status=status)

    def post(self, request, pk):
        channel = get_object_or_404(Channel, pk=pk)
        prefix = request.POST.get("prefix", "")
        form = AddServedModelForm(request.POST, prefix=prefix if prefix.startswith("m") else None)
        if form.is_valid():
            try:
                route = add_served_model(channel=channel, **form.cleaned_data)
            except ValidationError as exc:
                add_validation_errors(form, exc)
            else:
                messages.success(
                    request,
                    _("Model %(model)s added, routed to %(channel)s.")
                    % {"model": route.model.name, "channel": channel.name},
                )
                return redirect("channel_served_models", pk=channel.pk)
        return self.get(request, pk, forms={form["upstream_model"].value(): form}, status=400)


# --- models --------------------------------------------------------------------------------


class ModelListView(AdminRequiredMixin, FilteredListView):
    model = Model
    filterset_class = ModelFilterSet
    template_name = "channels/model_list.html"
    sort_fields = {"name": "name", "display_name": "display_name", "enabled": "enabled"}

    def get_base_queryset(self):
        return Model.objects.served().prefetch_related("routes__channel")

    def get_context_data(self, **kwargs):
        context = super().get_context_data(filter_fields=["enabled", "channel"], **kwargs)
        states = model_states([m.name for m in context["object_list"]])
        for m in context["object_list"]:
            m.state = states.get(m.name, {})
        return context


class ModelEditView(AdminRequiredMixin, ObjectFormView):
    """Create or edit a model and its routes (one inline formset row per channel)."""

    form_class = ModelForm
    queryset = Model.objects.served()
    template_name = "channels/model_form.html"
    success, cancel = "model_detail", "model_list"
    title = (gettext_lazy("Add model"), gettext_lazy("Edit model"))
    button = (gettext_lazy("Add model"), gettext_lazy("Save"))
    saved = (gettext_lazy("Model %(name)s added."), gettext_lazy("Model %(name)s saved."))

    def get_form(self, data: Any = None) -> ModelForm:
        self.formset = RouteFormSet(data, instance=self.object or Model(), prefix="routes")
        return ModelForm(data, instance=self.object)

    def is_valid(self, form: ModelForm) -> bool:
        form_ok = form.is_valid()  # both, so both show their errors
        return self.formset.is_valid() and form_ok

    def save(self, form: ModelForm) -> Model:
        model = form.save()
        routes = cast(BaseRouteFormSet, self.formset).routes
        replace_routes(model, routes, remove_priced=form.cleaned_data["remove_priced_routes"])
        return model

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return super().get_context_data(formset=self.formset, **kwargs)


class ModelDetailView(AdminRequiredMixin, DetailView):
    model = Model
    template_name = "channels/model_detail.html"
    context_object_name = "model_obj"

    def get(self, request, *args, **kwargs):
        alias = Model.objects.aliases().filter(pk=kwargs["pk"]).first()
        if alias is not None:  # a link that knows only "a model" (the audit log) opens the alias page
            return redirect("model_alias_detail", alias.pk)
        return super().get(request, *args, **kwargs)

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["routes"] = list(ModelRoute.objects.filter(model=self.object).select_related("channel"))
        attach_health([r.channel for r in context["routes"]])
        limits = self.object.effective_limits(cold=cold_windows())
        context["effective_context"], context["effective_output"] = limits
        self.object.state = model_states([self.object.name]).get(self.object.name, {})
        return context


class ModelDeleteView(AdminRequiredMixin, ObjectDeleteView):
    queryset = Model.objects.served()
    cancel, success = "model_detail", "model_list"
    title = gettext_lazy("Delete model")
    question = gettext_lazy("Delete the model %(name)s?")
    button = gettext_lazy("Delete model")
    deleted = gettext_lazy("Model %(name)s deleted.")

    def check(self, obj: Model) -> None:
        check_model_deletable(obj)

    def texts(self, obj: Model) -> dict[str, Any]:
        aliases = Model.objects.aliases().filter(targets__target=obj).order_by("name")
        if aliases:
            detail = _(
                "Requests for it fail with 404 and its routes are deleted. The aliases %(aliases)s stop trying it. "
                "Past usage records are kept."
            ) % {"aliases": i18n.listing(a.name for a in aliases)}
        else:
            detail = _("Requests for it fail with 404 and its routes are deleted. Past usage records are kept.")
        return {**super().texts(obj), "detail": detail, **priced_routes_note(ModelRoute.objects.filter(model=obj))}


# --- aliases -------------------------------------------------------------------------------


class AliasListView(AdminRequiredMixin, FilteredListView):
    model = Model
    filterset_class = ModelFilterSet
    template_name = "channels/alias_list.html"
    sort_fields = {"name": "name", "display_name": "display_name", "enabled": "enabled"}

    def get_base_queryset(self):
        return Model.objects.aliases().prefetch_related("targets__target")

    def get_context_data(self, **kwargs):
        return super().get_context_data(filter_fields=["enabled"], **kwargs)


class AliasEditView(AdminRequiredMixin, ObjectFormView):
    """Create or edit an alias: its public name and the models it tries, in order."""

    form_class = AliasForm
    queryset = Model.objects.aliases()
    success, cancel = "model_alias_detail", "model_alias_list"
    title = (gettext_lazy("Add alias"), gettext_lazy("Edit alias %(name)s"))
    button = (gettext_lazy("Add alias"), gettext_lazy("Save"))
    saved = (gettext_lazy("Alias %(name)s added."), gettext_lazy("Alias %(name)s saved."))

    def get_form_kwargs(self) -> dict[str, Any]:
        return {"instance": self.object}

    def save(self, form: AliasForm) -> Model:
        data = form.cleaned_data
        return save_alias(
            alias=self.object,
            name=data["name"],
            targets=form.targets,
            display_name=data["display_name"],
            description=data["description"],
            enabled=data["enabled"],
            local_only=data["local_only"],
        )


class AliasDetailView(AdminRequiredMixin, DetailView):
    model = Model
    queryset = Model.objects.aliases()
    template_name = "channels/alias_detail.html"
    context_object_name = "alias"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        alias = self.object
        rows = []
        cold = cold_windows()
        for t in alias.targets.select_related("target").order_by("position"):
            window, output = t.target.effective_limits(local_only=alias.local_only, cold=cold)
            routes = list(t.target.routes.enabled().select_related("channel"))
            rows.append({"target": t.target, "window": window, "output": output, "routes": routes})
        context["rows"] = rows
        context["effective_context"], context["effective_output"] = alias.effective_limits(cold=cold)
        return context


class AliasDeleteView(AdminRequiredMixin, ObjectDeleteView):
    queryset = Model.objects.aliases()
    cancel, success = "model_alias_detail", "model_alias_list"
    title = gettext_lazy("Delete alias")
    question = gettext_lazy("Delete the alias %(name)s?")
    detail = gettext_lazy("Requests for it fail with 404; the models it points at stay. Past usage records are kept.")
    button = gettext_lazy("Delete alias")
    deleted = gettext_lazy("Alias %(name)s deleted.")

    def check(self, obj: Model) -> None:
        check_model_deletable(obj)  # a key limited to the alias alone must not end up limited to nothing


class PriceListView(AdminRequiredMixin, View):
    """Every route with the price in effect (or "no price"), the history, a form for a new price and
    the starter catalogue's button."""

    template_name = "channels/price_list.html"

    def context(self, form: RoutePriceForm) -> dict:
        now = timezone.now()
        current: dict[int, RoutePrice] = {}
        for price in RoutePrice.objects.in_effect(now):
            current.setdefault(price.route_id, price)
        routes = ModelRoute.objects.select_related("model", "channel").order_by("model__name", "channel__name")
        rows = [{"route": r, "price": current.get(r.id)} for r in routes]
        history = RoutePrice.objects.select_related("route__model", "route__channel").order_by("-effective_from", "-id")
        return {
            "rows": rows,
            "history": history[:200],
            "form": form,
            "currency": currency(),
            "unpriced": sum(1 for r in rows if r["price"] is None),
            "policies": UnpricedPolicy.choices,
        }

    def get(self, request):
        return render(request, self.template_name, self.context(RoutePriceForm()))

    def post(self, request):
        if request.POST.get("action") == "catalogue":
            added = load_price_catalogue()
            messages.success(request, _("%(n)d route(s) priced from the starter catalogue.") % {"n": len(added)})
            return redirect("price_list")
        if request.POST.get("action") == "unpriced":
            policy = UnpricedPolicyForm(request.POST)
            if not policy.is_valid():
                messages.error(request, _("Choose a route and a policy."))
                return render(request, self.template_name, self.context(RoutePriceForm()), status=400)
            set_unpriced_policy(policy.cleaned_data["route"], policy.cleaned_data["unpriced"])
            messages.success(request, _("Saved for %(route)s.") % {"route": policy.cleaned_data["route"]})
            return redirect("price_list")
        form = RoutePriceForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            try:
                set_route_price(
                    data["route"],
                    input=data["input"],
                    output=data["output"],
                    cached_input=data["cached_input"],
                    cache_write=data["cache_write"],
                    effective_from=data["effective_from"],
                )
            except ValidationError as exc:
                add_validation_errors(form, exc)
            else:
                messages.success(request, _("Price saved for %(route)s.") % {"route": data["route"]})
                return redirect("price_list")
        return render(request, self.template_name, self.context(form), status=400)
