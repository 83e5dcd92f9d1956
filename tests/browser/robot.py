"""A person at the browser, for journey tests: clicks and types (never posts URLs), counts its
clicks and keeps the page's console errors, and can ask axe-core what it thinks of a page."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

AXE = Path(__file__).parent / "vendor" / "axe-4.10.3.min.js"
SERIOUS = ("critical", "serious")


def wait_until(page: Any, expression: str, timeout: float = 30.0) -> None:
    """Poll `expression` (JavaScript, or a function's source) in the page until it is truthy.
    Playwright's `wait_for_function` polls with `eval()` inside the page, which the portal's CSP
    refuses (no 'unsafe-eval'): it worked only when its first look, made another way, was already
    true, and failed when the page had not got there yet (CI: the key form's focus). `page.evaluate`
    goes through the DevTools protocol, which the CSP does not govern. A look made while the page
    navigates (its document is being replaced) counts as not yet."""
    from playwright.sync_api import Error

    deadline = time.monotonic() + timeout
    while True:
        try:
            if page.evaluate(expression):
                return
        except Error as exc:
            if "context was destroyed" not in str(exc) and "navigat" not in str(exc):
                raise
        assert time.monotonic() < deadline, f"timed out waiting for {expression}"
        page.wait_for_timeout(50)


@dataclass
class Robot:
    page: Any  # playwright.sync_api.Page
    base_url: str
    clicks: int = 0
    console_errors: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.page.set_default_timeout(30_000)
        self.page.on(
            "console", lambda m: m.type == "error" and self.console_errors.append(f"{self.page.url}: {m.text}")
        )
        self.page.on("pageerror", lambda exc: self.console_errors.append(f"{self.page.url}: {exc}"))

    # --- acting ------------------------------------------------------------------------------------
    def click(self, selector: str, **kwargs: Any) -> None:
        """Click, and when the click opened a page, let its document be parsed: Playwright returns
        once the new page's navigation is committed, and a look at it then (`.all()`, `text("main")`)
        could find nothing, or part of it (CI: the audit log's rows read as [])."""
        self.clicks += 1
        self.page.click(selector, **kwargs)
        self.page.wait_for_load_state("domcontentloaded")

    def fill(self, selector: str, value: str) -> None:
        self.page.fill(selector, value)

    def goto(self, path: str) -> None:
        """Only for the first page of a journey (a bookmark); everything after it is clicked."""
        self.page.goto(self.base_url + path)

    def log_in(self, username: str, password: str) -> None:
        self.fill("#id_username", username)
        self.fill("#id_password", password)
        self.click("main button[type=submit]")
        self.page.wait_for_url(self.base_url + "/")

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    # --- looking -----------------------------------------------------------------------------------
    def text(self, selector: str) -> str:
        return self.page.inner_text(selector)

    def axe_violations(self) -> list[str]:
        """Critical and serious axe-core violations on the current page, one line each."""
        if not self.page.evaluate("typeof window.axe !== 'undefined'"):
            # Through the DevTools protocol: an injected <script> tag would be refused by the
            # portal's Content-Security-Policy (script-src 'self'), as it should be.
            self.page.evaluate(AXE.read_text() + "\n;undefined")
        results = self.page.evaluate("() => axe.run(document, {resultTypes: ['violations']})")
        return [
            f"{self.page.url}: {v['impact']} {v['id']}: {v['help']} — "
            + "; ".join(n["target"][0] if isinstance(n["target"][0], str) else str(n["target"]) for n in v["nodes"][:3])
            for v in results["violations"]
            if v["impact"] in SERIOUS
        ]

    def overflow_px(self) -> int:
        """How far the page is wider than the viewport (0: no horizontal scrolling)."""
        return int(self.page.evaluate("document.documentElement.scrollWidth - window.innerWidth"))

    def overflowing(self, limit: int = 3) -> list[str]:
        """The outermost elements that stick out of the viewport on the right, to say what to fix."""
        return self.page.evaluate(
            """limit => {
                const w = window.innerWidth, out = [];
                for (const el of document.querySelectorAll('body *')) {
                    const r = el.getBoundingClientRect();
                    const p = el.parentElement && el.parentElement.getBoundingClientRect();
                    if (r.right > w + 1 && (!p || p.right <= w + 1)) {
                        const cls = typeof el.className === 'string' && el.className.trim();
                        out.push(el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
                                 (cls ? '.' + cls.replace(/\\s+/g, '.') : '') +
                                 ' (' + Math.round(r.right - w) + ' px)');
                        if (out.length >= limit) break;
                    }
                }
                return out;
            }""",
            limit,
        )
