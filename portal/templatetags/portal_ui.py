"""Template helpers for the portal's HTML pages."""

from __future__ import annotations

from django import template
from django.utils.html import format_html
from django.utils.translation import gettext

from portal import i18n

register = template.Library()

# Status words → badge colour class in portal.css.
_TONES = {
    "healthy": "ok",
    "online": "ok",
    "active": "ok",
    "ok": "ok",
    "degraded": "warn",
    "expired": "muted",
    "unknown": "muted",
    "owner inactive": "muted",
    "inactive": "muted",
    "down": "bad",
    "unreachable": "bad",
    "credentials_rejected": "bad",
    "auth_failed": "bad",
    "host_key_changed": "bad",
    "no_driver": "warn",
    "revoked": "bad",
    "crashed": "bad",
    "crash_loop": "bad",
    "dead": "bad",
}


@register.simple_tag
def badge(value, label=None):
    """A coloured status pill: `{% badge channel.status channel.get_status_display %}`."""
    text = label if label is not None else value
    tone = _TONES.get(str(value).lower(), "muted")
    return format_html('<span class="badge badge-{}">{}</span>', tone, text)


@register.filter(is_safe=True)
def sentences(text):
    """`{% filter sentences %}…{% endfilter %}` around messages put side by side: no space after a
    Chinese sentence's end (portal.i18n.sentences)."""
    return i18n.tidy_sentences(text)


@register.filter
def limit(value):
    """A limit for display: blank means unlimited."""
    if value in (None, ""):
        return gettext("unlimited")
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return value


_AUDIT_PAGES = {
    "host": "host_detail",
    "channel": "channel_detail",
    "model": "model_detail",
    "user": "user_detail",
    "key": "key_detail",
}


@register.filter
def audit_object_url(entry) -> str:
    """The page of an audit entry's object, if it still has one ("" otherwise)."""
    from django.urls import NoReverseMatch, reverse

    name = _AUDIT_PAGES.get(entry.object_type)
    if not name or not str(entry.object_id).isdigit() or entry.action == "delete":
        return ""
    try:
        return reverse(name, args=[int(entry.object_id)])
    except NoReverseMatch:
        return ""


@register.inclusion_tag("includes/secret_problem.html")
def secret_problem(obj):
    """A red flag on a row whose stored secret cannot be decrypted, with what to do."""
    from portal.fields import secret_problem as problem

    return {"problem": problem(obj)}


@register.simple_tag(takes_context=True)
def sort_header(context, key: str, label: str, css: str = ""):
    """A sortable column header for FilteredListView lists: a link that sorts by `key` (again:
    the other way), keeping the filters, with aria-sort on the column sorted by."""
    request = context["request"]
    current = context.get("sort", "")
    query = request.GET.copy()
    query.pop("page", None)
    ascending = current == key
    query["sort"] = f"-{key}" if ascending else key
    state = "ascending" if current == key else "descending" if current == f"-{key}" else ""
    arrow = {"ascending": " ▲", "descending": " ▼"}.get(state, "")
    return format_html(
        '<th scope="col"{}{}><a href="?{}" class="sort">{}<span aria-hidden="true">{}</span></a></th>',
        format_html(' class="{}"', css) if css else "",
        format_html(' aria-sort="{}"', state) if state else "",
        query.urlencode(),
        label,
        arrow,
    )


@register.inclusion_tag("includes/public_url_warning.html", takes_context=True)
def public_url_warning(context):
    """The warning that generated files point elsewhere than the browser's host (portal.public)."""
    from portal.public import host_mismatch

    request = context.get("request")
    return {"mismatch": host_mismatch(request) if request is not None else None}


@register.filter
def stored_lines(row, key: str) -> list[str]:
    """A JSON object's list of English lines `<key>` ("notes") in the reader's language, from the
    messages stored beside it as `<key without s>_items` (`Message.as_item`); an object stored
    before (lines only) shows its lines as written: `{% for note in fit|stored_lines:"notes" %}`."""
    row = row or {}
    lines, items = list(row.get(key) or []), row.get(f"{key.removesuffix('s')}_items")
    if not isinstance(items, list) or len(items) != len(lines):
        return [str(line) for line in lines]
    return i18n.rendered_items(items)


@register.filter
def stored_field(row, field: str) -> str:
    """A message stored in a JSON object as `<field>`, `<field>_code`, `<field>_params`, in the
    reader's language: `{{ advice|stored_field:"change" }}`."""
    row = row or {}
    return i18n.stored_text(str(row.get(field, "")), str(row.get(f"{field}_code", "")), row.get(f"{field}_params"))
