"""What every HTML view shares: the generic form and confirmation pages, filtered + paginated
lists, show-once secrets, flash + redirect.

The admin check is `portal.permissions`.

The flow of a page is written once here; a page declares only what differs (NetBox's generic views):

- `ObjectFormView`: create or edit one object (`portal/object_form.html`). Declare `form_class`,
  `queryset` (edit: the object is `pk` from the URL; no `pk` creates), `success` (a URL name taking
  the saved object's pk), the texts (`title`, `button`, `saved`, each a (create, edit) pair), and
  override `save(form)` to call the service. The form may declare `fieldsets` (`Fieldset`). A rule
  the service enforces before an edit goes in `check(obj)`, as in ConfirmView.
- `ConfirmView`: a question (GET, `portal/confirm.html`) and its action (POST). Declare `queryset`,
  the texts, `cancel`, and `act(obj)`; a rule the service enforces goes in `check(obj)` (it raises
  ValidationError: flashed, and the page goes back), asked on GET and POST alike.
- `ObjectDeleteView`: a ConfirmView that deletes, explaining instead of a 500 when rows still
  need the object.

Texts are lazy translations with named placeholders filled from `names(obj)` (`%(name)s` is the
object's name), so each is one whole sentence for the translator.

Lists use the same FilterSets as the REST API (STYLE.md), so a filter means the same thing in both.
Secrets (new keys, tokens, passwords) travel from the POST to the page that shows them through the
session, encrypted, and are removed when shown: a reload shows nothing.
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django import forms as djforms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import ProtectedError, QuerySet, RestrictedError
from django.http import HttpRequest, HttpResponse, HttpResponseBase, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.cache import patch_cache_control
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _
from django.views import View
from django.views.generic import ListView

from . import i18n, secrets

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


UNKNOWN_SORT = _("Cannot sort by %(sort)s, so the table is in its usual order. Choose one of: %(choices)s.")


def sort_queryset(
    request: HttpRequest, qs: QuerySet, sort_fields: dict[str, str], *, warn: bool = True
) -> tuple[QuerySet, str]:
    """Order `qs` by `?sort=key` / `?sort=-key` (keys of `sort_fields`, values ORM fields) and return
    the sort in effect for `{% sort_header %}` (context "sort")."""
    raw = _asked_sort(request, sort_fields, warn)
    if not raw:
        return qs, ""
    field = sort_fields[raw.removeprefix("-")]
    return qs.order_by(f"-{field}" if raw.startswith("-") else field, "-pk"), raw


def sort_rows(
    request: HttpRequest, rows: list[dict[str, Any]], columns: set[str], *, warn: bool = True
) -> tuple[list[dict[str, Any]], str]:
    """`sort_queryset` for rows already computed (aggregate tables): `?sort=key` / `?sort=-key` over
    the dict keys in `columns`; empty values last either way."""
    raw = _asked_sort(request, columns, warn)
    if not raw:
        return rows, ""
    key = raw.removeprefix("-")
    present = [r for r in rows if r.get(key) is not None]
    missing = [r for r in rows if r.get(key) is None]
    present.sort(key=lambda r: _sortable(r[key]), reverse=raw.startswith("-"))
    return present + missing, raw


def _asked_sort(request: HttpRequest, keys: Iterable[str], warn: bool) -> str:
    """`?sort=` when it names one of `keys`, else "". An unknown key (a stale bookmark, a typo) leaves
    the usual order with a warning on the page (`warn`), as the API's `?ordering=` answers a 400:
    ignored silently, the reader took the table for sorted as asked."""
    raw = request.GET.get("sort", "")
    if raw and raw.removeprefix("-") not in keys:
        if warn:
            messages.warning(request, UNKNOWN_SORT % {"sort": raw, "choices": i18n.listing(sorted(keys))})
        return ""
    return raw


def _sortable(value: Any) -> Any:
    return value.casefold() if isinstance(value, str) else value


def _friendly_filter_widgets(form: djforms.BaseForm) -> None:
    """'any / yes / no' instead of django's 'Unknown / Yes / No'; 'any' as the empty choice."""
    for field in form.fields.values():
        if isinstance(field.widget, djforms.NullBooleanSelect):
            field.widget.choices = [("", _("any")), ("true", _("yes")), ("false", _("no"))]
        elif isinstance(field, djforms.ModelChoiceField) and not isinstance(field, djforms.ModelMultipleChoiceField):
            field.empty_label = _("any")
        elif isinstance(field, djforms.ChoiceField) and not isinstance(field, djforms.MultipleChoiceField):
            choices: Any = field.choices  # the stubs' union includes the callable form the setter takes
            if hasattr(field, "empty_label"):  # django-filter adds its "---------" while iterating
                field.empty_label = _("any")
                field.widget.choices = list(choices)
            else:
                field.choices = [("", _("any")), *[c for c in choices if c[0] != ""]]


def remember_secret(request: HttpRequest, slot: str, value: str) -> None:
    """Keep `value` (encrypted) in the session until `pop_secret` shows it once."""
    stash = request.session.get(_SESSION_SECRETS, {})
    stash[slot] = secrets.encrypt(value)
    request.session[_SESSION_SECRETS] = stash


def pop_secret(request: HttpRequest, slot: str) -> str | None:
    """The secret `remember_secret` kept, once. The page that shows it is never stored by the
    browser or a proxy (`SecretPageMiddleware`): the back button or a shared cache must not show
    it again."""
    stash = request.session.get(_SESSION_SECRETS, {})
    token = stash.pop(slot, None)
    if token is None:
        return None
    request.session[_SESSION_SECRETS] = stash
    request.shows_secret = True  # type: ignore[attr-defined]
    try:
        return secrets.decrypt(token)
    except ValueError:
        return None


class SecretPageMiddleware:
    """`Cache-Control: no-store` on a response that shows a secret once (`pop_secret`)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if getattr(request, "shows_secret", False):
            patch_cache_control(response, no_store=True, private=True)
        return response


def add_validation_errors(form: djforms.BaseForm, exc: ValidationError) -> None:
    """Attach a service's ValidationError to the form's fields (unknown field names go on top; a
    form's `service_error_fields` maps a service's name to its own, e.g. {"targets": "target_0"})."""
    if hasattr(exc, "error_dict"):
        renamed: dict[str, str] = getattr(form, "service_error_fields", {})
        for name, errors in exc.message_dict.items():
            field = renamed.get(name, name)
            form.add_error(field if field in form.fields else None, errors)
    else:
        form.add_error(None, exc.messages)


def done(
    request: HttpRequest, message: str, to: str, *args, level: int = messages.SUCCESS, **kwargs
) -> HttpResponseRedirect:
    """Flash `message` and redirect: every action ends this way."""
    messages.add_message(request, level, message)
    return redirect(to, *args, **kwargs)


# --- create / edit ------------------------------------------------------------------------------

Text = str | Promise  # a string, or a lazy translation


@dataclass(frozen=True)
class Fieldset:
    """A group of a form's fields on the generic form page: `legend` (none: no box), a `note` under
    it, and the fields side by side (`grid`) or one under another. A form lists them in `fieldsets`;
    fields it names but does not have (e.g. "clear the key" on create) are left out."""

    fields: Sequence[str]
    legend: Text = ""
    note: Text = ""
    grid: bool = True


def fieldsets(form: djforms.BaseForm) -> list[dict[str, Any]]:
    """The form's `fieldsets` bound to its fields, for `portal/object_form.html`; a form without
    them is one stacked group of all its fields."""
    declared: Sequence[Fieldset] = getattr(form, "fieldsets", ()) or (Fieldset(list(form.fields), grid=False),)
    return [
        {
            "legend": fs.legend,
            "note": fs.note,
            "grid": fs.grid,
            "fields": [form[name] for name in fs.fields if name in form.fields],
        }
        for fs in declared
    ]


def names(obj: Any) -> dict[str, Any]:
    """The placeholders every generic text may use: `%(name)s` is the object's name (or str())."""
    return {"name": getattr(obj, "name", None) or str(obj)}


EDITED_FROM = "edited_from"  # the hidden field of an edit form: `ObjectFormView.stamp` when it was shown
CONFLICT = _(
    "%(name)s was changed by someone else since this page was opened. Your values are below and nothing "
    "was saved: open the page again in another tab to see theirs, or save again to replace them with yours."
)


class ObjectFormView(View):
    """Create or edit one object; the flow is written once. GET shows the form; POST validates it
    and calls `save(form)` (the service) in a transaction; a ValidationError from the service lands
    on the form's fields; an invalid form answers 400 with its errors; success flashes `saved` and
    redirects to `success` with the object's pk. Permissions come from the mixin put before it."""

    form_class: type[djforms.BaseForm]
    queryset: QuerySet[Any] | None = None  # where an edit's `pk` is looked up; None: create only
    template_name = "portal/object_form.html"
    success = ""  # URL name taking the saved object's pk
    cancel = ""  # URL name (no arguments) Cancel goes to on create; on edit: `success` of the object
    title: tuple[Text, Text] = ("", "")  # (create, edit); may use %(name)s on edit
    button: tuple[Text, Text] = (_("Create"), _("Save"))
    saved: tuple[Text, Text] = ("", "")
    intro: Text = ""  # a line under the heading
    invalid_status = 400  # the answer to an invalid form

    object: Any = None

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        self.object = self.get_object()  # after the permission mixins put before this class
        if self.object is not None:
            try:
                self.check(self.object)
            except ValidationError as exc:
                messages.error(request, i18n.sentences(*exc.messages))
                return redirect(self.get_success_url(self.object))
        return super().dispatch(request, *args, **kwargs)

    def check(self, obj: Any) -> None:
        """Raise ValidationError when `obj` may not be edited (the service's rule): it is flashed and
        the page goes back to the object, on GET and POST alike."""

    @property
    def creating(self) -> bool:
        return self.object is None

    def get_object(self) -> Any:
        pk = self.kwargs.get("pk")
        if pk is None or self.queryset is None:
            return None
        return get_object_or_404(self.queryset, pk=pk)

    def get_form_kwargs(self) -> dict[str, Any]:
        """Extra arguments of the form (a ModelForm gets the object as `instance`)."""
        if issubclass(self.form_class, djforms.BaseModelForm):
            return {"instance": self.object}
        return {}

    def get_form(self, data: Any = None) -> djforms.BaseForm:
        return self.form_class(data, **self.get_form_kwargs())

    def is_valid(self, form: Any) -> bool:
        """Override to check more than the form (e.g. a formset beside it)."""
        return bool(form.is_valid())

    def save(self, form: Any) -> Any:
        """Store the valid form and return the object; override to call the service."""
        return form.save()

    def text(self, pair: tuple[Text, Text], obj: Any) -> str:
        template = pair[0] if self.creating else pair[1]
        return str(template) % names(obj) if obj is not None else str(template)

    def saved_message(self, obj: Any, form: Any) -> str:
        return self.text(self.saved, obj)

    def get_success_url(self, obj: Any) -> str:
        return reverse(self.success, args=[obj.pk])

    def get_cancel_url(self) -> str:
        return self.get_success_url(self.object) if self.object is not None else reverse(self.cancel)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        form = kwargs["form"]
        return {
            "object": self.object,
            "title": self.text(self.title, self.object),
            "button": self.text(self.button, self.object),
            "intro": self.intro,
            "cancel_url": self.get_cancel_url(),
            "fieldsets": fieldsets(form),
            "edited_from": self.edited_from,
            **kwargs,
        }

    def render_form(self, form: djforms.BaseForm, status: int = 200) -> HttpResponse:
        return render(self.request, self.template_name, self.get_context_data(form=form), status=status)

    edited_from = ""  # `stamp` of the object as the page showed it (a hidden field of an edit form)

    @staticmethod
    def stamp(form: djforms.BaseForm) -> str:
        """A digest of what an unbound form of the object shows (its initial values): another
        admin's save of any of them changes it; a change of anything else (a channel's health, a
        deployment's status) does not."""
        values = {
            k: sorted(map(str, v)) if isinstance(v, list | tuple | set) else str(v) for k, v in form.initial.items()
        }
        shown = json.dumps(values, sort_keys=True)
        return hashlib.sha256(shown.encode()).hexdigest()[:24]

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        form = self.get_form()
        if self.object is not None:
            self.edited_from = self.stamp(form)
        return self.render_form(form)

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        shown = request.POST.get(EDITED_FROM, "")
        if self.object is not None and shown:
            self.edited_from = self.stamp(self.get_form())
            if shown != self.edited_from:
                # Saved by someone else since this page was opened: theirs is not overwritten
                # unseen. The page keeps these values; sent again, they are saved (the stamp is now).
                form = self.get_form(request.POST)
                self.is_valid(form)
                form.add_error(None, CONFLICT % names(self.object))
                return self.render_form(form, status=409)
        form = self.get_form(request.POST)
        if self.is_valid(form):
            try:
                with transaction.atomic():
                    obj = self.save(form)
            except ValidationError as exc:
                add_validation_errors(form, exc)
            else:
                return done(request, self.saved_message(obj, form), self.get_success_url(obj))
        if self.object is not None:
            self.object.refresh_from_db()  # the heading shows the stored name, not the rejected one
        return self.render_form(form, status=self.invalid_status)


# --- confirm ----------------------------------------------------------------------------------


class ConfirmView(View):
    """A question, then the action: GET shows `portal/confirm.html`, POST calls `act(obj)`. A rule
    the service enforces is asked first, on GET and POST alike (`check`): its ValidationError is
    flashed and the page goes back to `cancel`. The texts may use `names(obj)`'s placeholders."""

    queryset: QuerySet[Any] | None = None  # the object is `pk` from the URL in it
    template_name = "portal/confirm.html"
    title: Text = ""
    question: Text = ""
    detail: Text = ""
    button: Text = _("Confirm")
    danger = False
    cancel = ""  # URL name taking the object's pk
    # An optional checkbox: its name, label, and whether it starts ticked (`<name>_offered` is posted too).
    choice = ""
    choice_label: Text = ""
    choice_checked = False

    def get_object(self) -> Any:
        assert self.queryset is not None, "declare queryset or override get_object()"
        return get_object_or_404(self.queryset, pk=self.kwargs["pk"])

    def names(self, obj: Any) -> dict[str, Any]:
        return names(obj)

    def check(self, obj: Any) -> None:
        """Raise ValidationError when the action is not allowed (the service's rule)."""

    def act(self, obj: Any) -> HttpResponse:
        raise NotImplementedError

    def get_cancel_url(self, obj: Any) -> str:
        return reverse(self.cancel, args=[obj.pk])

    def texts(self, obj: Any) -> dict[str, Any]:
        """What the page says; override to add or change a text."""
        values = self.names(obj)
        fill = {k: str(getattr(self, k)) % values for k in ("title", "question", "detail", "button", "choice_label")}
        return {**fill, "danger": self.danger, "choice_name": self.choice, "choice_checked": self.choice_checked}

    def refused(self, obj: Any) -> HttpResponse | None:
        try:
            self.check(obj)
        except ValidationError as exc:
            messages.error(self.request, " ".join(exc.messages))
            return redirect(self.get_cancel_url(obj))
        return None

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        obj = self.get_object()
        if refusal := self.refused(obj):
            return refusal
        context = {"object": obj, "cancel_url": self.get_cancel_url(obj), **self.texts(obj)}
        return render(request, self.template_name, context)

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        obj = self.get_object()
        return self.refused(obj) or self.act(obj)

    def chose(self) -> bool:
        """Whether the checkbox was ticked; a POST that was not offered it (a script) and does not
        say gets its default (`choice_checked`)."""
        if self.choice in self.request.POST:
            return self.request.POST[self.choice] == "on"
        return self.choice_checked and not self.request.POST.get(f"{self.choice}_offered")


class ObjectDeleteView(ConfirmView):
    """Delete after a confirmation, then go to `success` (a URL name without arguments); say who
    still needs the object instead of a 500 when rows are protected (e.g. a host with deployments)."""

    danger = True
    success = ""
    deleted: Text = ""  # the flash message, e.g. _("Channel %(name)s deleted.")

    def delete(self, obj: Any) -> None:
        """Override to call a service."""
        obj.delete()

    def act(self, obj: Any) -> HttpResponse:
        values = self.names(obj)
        try:
            with transaction.atomic():
                self.delete(obj)
        except (ProtectedError, RestrictedError) as exc:
            blocking = exc.protected_objects if isinstance(exc, ProtectedError) else exc.restricted_objects
            blockers = sorted({str(o) for o in blocking})
            listed = i18n.listing(blockers, 5)
            return done(
                self.request,
                _("%(object)s is still used by %(listed)s; remove those first.") % {"object": obj, "listed": listed},
                self.get_cancel_url(obj),
                level=messages.ERROR,
            )
        return done(self.request, str(self.deleted) % values, self.success)


# Spreadsheet apps run a cell starting with one of these as a formula (OWASP's CSV injection list:
# a tab or carriage return first hides the sign that follows it); names in exports are user-chosen.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value: str) -> str:
    """`value` for a CSV cell: prefixed with ' when a spreadsheet would read it as a formula."""
    return "'" + value if value.startswith(FORMULA_STARTS) else value


def csv_download(filename: str, header: Iterable[object]) -> tuple[HttpResponse, Any]:
    """A CSV attachment with its header row (labels in the reader's language) and a writer for
    the rest. It starts with a UTF-8 byte order mark: without one, Excel reads the file in the
    system's code page, and on a Chinese Windows every Chinese name and header is mojibake."""
    response = HttpResponse("\ufeff", content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    writer = csv.writer(response)
    writer.writerow([str(label) for label in header])
    return response, writer


def bad_query(request: HttpRequest, title: object, form: djforms.BaseForm) -> HttpResponse:
    """A report's page (or its CSV) asked with a query it cannot read: a 400 saying which value and
    why, rather than the default report, which a reader took for the one they asked for."""
    return render(request, "portal/bad_query.html", {"title": title, "form": form}, status=400)
