"""Small helpers every HTML view shares: filtered + paginated lists, show-once secrets, flash + redirect.

The admin check is `portal.permissions`.

Lists use the same FilterSets as the REST API (STYLE.md), so a filter means the same thing in both.
Secrets (new keys, tokens, passwords) travel from the POST to the page that shows them through the
session, encrypted, and are removed when shown: a reload shows nothing.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponseRedirect
from django.shortcuts import redirect
from django.utils.text import capfirst
from django.utils.translation import gettext_lazy as _
from django.views.generic import ListView

from . import secrets

PAGE_SIZE = 25
_SESSION_SECRETS = "portal_show_once"


class FilteredListView(ListView):
    """A ListView driven by a django-filter FilterSet, with a search box, pagination and sortable
    columns: `sort_fields` maps a column's key to the ORM field it sorts by; `?sort=key` sorts
    ascending, `?sort=-key` descending (`{% sort_header "key" "Label" %}` draws the header)."""

    filterset_class: Any = None
    paginate_by = PAGE_SIZE
    sort_fields: dict[str, str] = {}

    def get_base_queryset(self) -> QuerySet:
        return super().get_queryset()

    def get_queryset(self) -> QuerySet:
        data = self.request.GET or None
        self.filterset = self.filterset_class(data, queryset=self.get_base_queryset(), request=self.request)
        _friendly_filter_widgets(self.filterset.form)
        if self.filterset.is_bound and not self.filterset.is_valid():
            # An invalid filter value (e.g. ?owner=abc) shows the errors and an empty list, not a 500.
            return self.get_base_queryset().none()
        return self.sorted(self.filterset.qs)

    def sorted(self, qs: QuerySet) -> QuerySet:
        qs, self.sort = sort_queryset(self.request, qs, self.sort_fields)
        return qs

    def paginate_queryset(self, queryset, page_size):
        # A stale ?page=99 (after deleting rows) shows the last page instead of a 404.
        paginator = self.get_paginator(queryset, page_size)
        page = paginator.get_page(self.request.GET.get("page"))
        return paginator, page, page.object_list, page.has_other_pages()

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["filter"] = self.filterset
        query = self.request.GET.copy()
        query.pop("page", None)
        context["query_string"] = query.urlencode()
        context["filtered"] = any(v for k, v in self.request.GET.items() if k not in ("page", "sort"))
        context["sort"] = getattr(self, "sort", "")
        return context


def sort_queryset(request: HttpRequest, qs: QuerySet, sort_fields: dict[str, str]) -> tuple[QuerySet, str]:
    """Order `qs` by `?sort=key` / `?sort=-key` (keys of `sort_fields`, values ORM fields) and return
    the sort in effect for `{% sort_header %}` (context "sort"); an unknown key is ignored, not a 500."""
    raw = request.GET.get("sort", "")
    key = raw.removeprefix("-")
    if key not in sort_fields:
        return qs, ""
    field = sort_fields[key]
    return qs.order_by(f"-{field}" if raw.startswith("-") else field, "-pk"), raw


def sort_rows(request: HttpRequest, rows: list[dict[str, Any]], columns: set[str]) -> tuple[list[dict[str, Any]], str]:
    """`sort_queryset` for rows already computed (aggregate tables): `?sort=key` / `?sort=-key` over
    the dict keys in `columns`; empty values last either way. Unknown keys leave the order as is."""
    raw = request.GET.get("sort", "")
    key = raw.removeprefix("-")
    if key not in columns:
        return rows, ""
    present = [r for r in rows if r.get(key) is not None]
    missing = [r for r in rows if r.get(key) is None]
    present.sort(key=lambda r: _sortable(r[key]), reverse=raw.startswith("-"))
    return present + missing, raw


def _sortable(value: Any) -> Any:
    return value.casefold() if isinstance(value, str) else value


def _friendly_filter_widgets(form) -> None:
    """'any / yes / no' instead of django's 'Unknown / Yes / No'; 'any' as the empty choice."""
    from django import forms as djforms

    for field in form.fields.values():
        if isinstance(field.widget, djforms.NullBooleanSelect):
            field.widget.choices = [("", "any"), ("true", "yes"), ("false", "no")]
        elif isinstance(field, djforms.ModelChoiceField) and not isinstance(field, djforms.ModelMultipleChoiceField):
            field.empty_label = "any"
        elif isinstance(field, djforms.ChoiceField) and not isinstance(field, djforms.MultipleChoiceField):
            choices: Any = field.choices  # the stubs' union includes the callable form the setter takes
            if hasattr(field, "empty_label"):  # django-filter adds its "---------" while iterating
                field.empty_label = "any"
                field.widget.choices = list(choices)
            else:
                field.choices = [("", "any"), *[c for c in choices if c[0] != ""]]


def remember_secret(request: HttpRequest, slot: str, value: str) -> None:
    """Keep `value` (encrypted) in the session until `pop_secret` shows it once."""
    stash = request.session.get(_SESSION_SECRETS, {})
    stash[slot] = secrets.encrypt(value)
    request.session[_SESSION_SECRETS] = stash


def pop_secret(request: HttpRequest, slot: str) -> str | None:
    stash = request.session.get(_SESSION_SECRETS, {})
    token = stash.pop(slot, None)
    if token is None:
        return None
    request.session[_SESSION_SECRETS] = stash
    try:
        return secrets.decrypt(token)
    except ValueError:
        return None


def add_validation_errors(form, exc: ValidationError) -> None:
    """Attach a service's ValidationError to the form's fields (unknown field names go on top)."""
    if hasattr(exc, "error_dict"):
        for field, errors in exc.message_dict.items():
            form.add_error(field if field in form.fields else None, errors)
    else:
        form.add_error(None, exc.messages)


def done(
    request: HttpRequest, message: str, to: str, *args, level: int = messages.SUCCESS, **kwargs
) -> HttpResponseRedirect:
    """Flash `message` and redirect: every action ends this way."""
    messages.add_message(request, level, message)
    return redirect(to, *args, **kwargs)


class InvalidFormStatusMixin:
    """Answer an invalid form with 400 (the page still shows the form and its errors)."""

    def form_invalid(self, form):
        response = super().form_invalid(form)
        response.status_code = 400
        return response


class SafeDeleteMixin:
    """A DeleteView that says "<Model> <name> deleted." and explains, instead of a 500, when other
    rows still need the object (e.g. a host with deployments is protected)."""

    def form_valid(self, form):
        from django.db.models import ProtectedError, RestrictedError

        name = getattr(self.object, "name", self.object)
        try:
            response = super().form_valid(form)
        except (ProtectedError, RestrictedError) as exc:
            blocking = getattr(exc, "protected_objects", None) or getattr(exc, "restricted_objects", ())
            blockers = sorted({str(o) for o in blocking})
            listed = ", ".join(blockers[:5]) + ("…" if len(blockers) > 5 else "")
            messages.error(
                self.request,
                _("%(object)s is still used by %(listed)s; remove those first.")
                % {"object": self.object, "listed": listed},
            )
            return redirect(self.request.path.rsplit("delete/", 1)[0])
        messages.success(self.request, f"{capfirst(self.model._meta.verbose_name)} {name} deleted.")
        return response
