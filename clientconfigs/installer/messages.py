"""The installer's and doctor's own messages, translated on the portal for the developer's language.

install.py and install.ps1 run on the developer's machine without gettext: the portal renders them
with a table {English template: translation} in the language the Connect page asked for, and their
output is matched against the templates (`{name}` stands for a value) and printed translated. A
message missing here prints in English; tests/clientconfigs/test_installer_i18n.py checks that
every template is still one the scripts print.
"""

from __future__ import annotations

from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext, gettext_noop

TEMPLATES = (
    # install.py: installing
    gettext_noop("{label}: import link opened in CC Switch; confirm it there"),
    gettext_noop("{label}: open this link on this machine (it holds your key): {url}"),
    gettext_noop("no CC Switch database at {db} (CC Switch not installed or never started here)"),
    gettext_noop("{path}: left unchanged ({error}); import with the links instead:"),
    gettext_noop("{path}: provider {name} for {apps} (backup: {backup})"),
    gettext_noop("it is CC Switch's current provider for {apps}: switch away and back in CC Switch to apply"),
    gettext_noop("switch to {name} in CC Switch (restart CC Switch first if it is open)"),
    gettext_noop("{path}: left unchanged ({error}). Copy the {name} shown on the portal page by hand."),
    gettext_noop(
        "{path}: left unchanged, the installer cannot edit it safely ({error}). Fix that and run a new install "
        "command from the Connect page, or copy the {name} shown there by hand."
    ),
    gettext_noop("{path} (backup: {backup})"),
    gettext_noop("key {name} ({masked}) minted for this machine; revoke it on the portal if lost"),
    gettext_noop("it replaces the key minted before for this client ({masked}), which stops at {stops}"),
    gettext_noop("config version {version}"),
    gettext_noop("{path}: left unchanged ({error}); remove the teamgw-… MCP servers by hand"),
    gettext_noop("{path}: the team MCP servers no longer allowed are removed"),
    # install.py: uninstalling (a specific template before the catch-all "{path} (backup: {backup})")
    gettext_noop("{path}: left unchanged ({error}); remove the team gateway entries by hand"),
    gettext_noop("unknown client {clients}; one of: all, {names}"),
    gettext_noop("unknown client {client}; one of: {names}"),
    gettext_noop("nothing of the team gateway's is installed here for: {clients}"),
    gettext_noop("delete (only ours in it): {path}"),
    gettext_noop("remove our entries from: {path}"),
    gettext_noop("leave as it is (you changed our settings in it since the install): {path}"),
    gettext_noop("Remove the team gateway's entries listed above?"),
    gettext_noop("nothing removed (pass --yes to remove without asking)"),
    gettext_noop("{path}: {count} provider row(s) of {name} removed (backup: {backup})"),
    gettext_noop("{path}: deleted (backup: {backup})"),
    gettext_noop("{path}: our entries removed (backup: {backup})"),
    gettext_noop("{path}: your own value put back (backup: {backup})"),
    gettext_noop("{path}: our entries removed and your own {names} put back (backup: {backup})"),
    gettext_noop(
        "{path}: your own {names} from before the install is not put back (we never store a credential); "
        "it is in {backup}"
    ),
    gettext_noop("{path}: kept your later change to it as it is"),
    gettext_noop("{path}: kept your later change to {names} as it is"),
    gettext_noop("the keys minted for these clients still work until you revoke them on the portal"),
    # install.py: the doctor
    gettext_noop("{file}: no team MCP servers installed"),
    gettext_noop("{file}: not found (run the installer first)"),
    gettext_noop("{file}: cannot be read ({error})"),
    gettext_noop("{file}: the installer cannot edit it safely ({error}); fix that and install again"),
    gettext_noop("{file}: no base URL points at {gateway} (found: {found})"),
    gettext_noop("{file}: no base URL points at {gateway} (found: none)"),
    gettext_noop("{file}: base URL {url} has the right shape"),
    gettext_noop("{file} line {line}: base URL {url} should be {shape}"),
    gettext_noop("no key found in the files or in TEAM_GATEWAY_API_KEY"),
    gettext_noop("cannot reach {gateway}: {error}"),
    gettext_noop(
        "the gateway rejected the key ({status}): it is wrong, revoked or expired; "
        "run a new install command from the Connect page"
    ),
    gettext_noop("GET {url} answered {status}"),
    gettext_noop("key valid"),
    gettext_noop("{file} lines {lines}: model {name} is listed {count} times; keep one (download again)"),
    gettext_noop("{file} line {line}: model {name} is not available to this key (available: {models}); download again"),
    gettext_noop("{file} line {line}: model {name} is not available to this key (available: none); download again"),
    gettext_noop(
        "{file} line {line}: model {name} has no context window in the file, {real} on the server: download again"
    ),
    gettext_noop(
        "{file} line {line}: model {name} has context window {have} in the file, {real} on the server: download again"
    ),
    gettext_noop(
        "{file} line {line}: model {name} output limit {out} in the file, the server allows {limit}: download again"
    ),
    gettext_noop(
        "{file} line {line}: model {name} output limit {out} in the file, the server allows below the window "
        "{real}: download again"
    ),
    gettext_noop("model {name}: reachable, context window {real} agrees with the server"),
    gettext_noop("model {name}: reachable"),
    gettext_noop(
        "model {name}: its window ({real} tokens) cannot hold {client}'s own prompt and an answer (about {need} "
        "tokens): it will fail even on a one-line request; use a model with a larger window"
    ),
    gettext_noop("models on the server for this key: {models}"),
    gettext_noop("no models on the server for this key"),
    gettext_noop("all checks passed"),
    gettext_noop("{count} problem(s)"),
    gettext_noop("{file}: MCP server {name} has no URL"),
    gettext_noop("{file}: MCP server {name} ({url}): {why}"),
    gettext_noop(
        "MCP server {name}: the team's server is down ({reason}); as of its last check ({checked}) you may call {tools}"
    ),
    gettext_noop("MCP server {name}: you may call {tools}"),
    # values of the messages above, when there is none (translated on their own)
    gettext_noop("unknown"),
    gettext_noop("never"),
    gettext_noop("nothing"),
    gettext_noop("this client"),
    gettext_noop("MCP server {name}: reachable, but this key may call none of its tools"),
    # install.ps1's own wording
    gettext_noop("{file}: not found"),
    gettext_noop("{file}: base URL {url} has the wrong shape ({shape})"),
    gettext_noop("models for this key: {models}"),
    gettext_noop("the gateway rejected the key or is unreachable: {error}"),
    gettext_noop("{path} left unchanged ({error}). Copy {name} from the portal page by hand."),
    gettext_noop("{path} left unchanged ({error}); remove the team gateway entries by hand"),
    gettext_noop("{path}: remove the {client} provider Team Gateway in CC Switch itself"),
    gettext_noop("unknown client {client}"),
    gettext_noop("{path}: left unchanged ({error}); remove the teamgw-... MCP servers by hand"),
    gettext_noop("{file}: CC Switch's database is checked on macOS and Linux only"),
    gettext_noop("MCP server {name} ({url}): the gateway refused or is unreachable: {error}"),
    gettext_noop("nothing removed (pass -Yes to remove without asking)"),
    gettext_noop(
        "usage: -Token <download-token> (from {portal}/connect/), -Check <client> or -Uninstall <client>|all [-Yes]"
    ),
    gettext_noop(
        "the portal refused the download token: download tokens work once and for 10 minutes; get a new "
        "command from the portal."
    ),
)


def language_of(requested: str | None) -> str:
    """A language the portal has (`?lang=` on the installer's URL), else the request's."""
    codes = {code for code, _ in settings.LANGUAGES}
    code = (requested or "").lower()
    return code if code in codes else translation.get_language() or "en"


def table(language: str) -> dict[str, str]:
    """{template: translation} for the templates `language` translates (empty for English)."""
    with translation.override(language):
        return {t: gettext(t) for t in TEMPLATES if gettext(t) != t}


def lang_query(language: str | None = None) -> str:
    """What the installer URLs on the Connect page and in the API carry: `?lang=` when not English."""
    code = language_of(language)
    return "" if code == settings.LANGUAGE_CODE else f"?lang={code}"
