"""The exported page's Content-Security-Policy in Chromium: the viewer works under it with no
violation (bootstrap by hash, bundle and layout worker from blob:, WebAssembly), while an
injected inline script, an inline event handler and any network request are refused."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.widgets.models import mlp_inputs
from thunderviz.debug import Session
from thunderviz.widgets import export_html
from thunderviz.widgets.html_export import content_security_policy

pytestmark = pytest.mark.browser

TIMEOUT = 30_000

# Listen before anything runs: every CSP violation of the page, as "directive blocked-uri".
RECORD_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__violations.push(`${e.effectiveDirective} ${e.blockedURI}`));
"""


def test_the_page_runs_under_a_strict_policy(browser_context, tmp_path):
    model, x, target = mlp_inputs()
    path = export_html(Session(model, x, target), tmp_path / "mlp.html")
    text = path.read_text(encoding="utf-8")
    policy = content_security_policy()
    assert f'<meta http-equiv="Content-Security-Policy" content="{policy}">' in text.replace(
        "&#x27;", "'"
    )
    for directive in ("default-src 'none'", "connect-src 'none'"):
        assert directive in policy
    assert "'unsafe-inline'" not in policy.split("script-src", 1)[1].split(";", 1)[0]

    page = browser_context.new_page()
    completed: list[str] = []  # requests that got a response (a refused one fails instead)
    errors: list[str] = []
    page.on("requestfinished", lambda r: completed.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.add_init_script(RECORD_VIOLATIONS)
    try:
        page.goto(path.resolve().as_uri())
        forward = page.locator('.tv-graph-pane[data-tv-graph="forward"]')
        expect(forward).to_have_attribute("data-tv-ready", "true", timeout=TIMEOUT)
        expect(forward.locator("g.node").first).to_be_visible()
        assert page.evaluate("() => window.thunderviz !== undefined")
        # No violation: the bundle, the layout worker (a refused one would report worker-src
        # and fall back to the main thread) and Graphviz's WebAssembly were all allowed.
        assert page.evaluate("() => window.__violations") == [], "the viewer itself is allowed"

        # What an attacker's markup would try: each is refused and reported.
        page.evaluate("""() => {
            window.__ran = [];
            const s = document.createElement("script");
            s.textContent = "window.__ran.push('inline script')";
            document.body.appendChild(s);
            const b = document.createElement("button");
            b.setAttribute("onclick", "window.__ran.push('inline handler')");
            document.body.appendChild(b);
            b.click();
        }""")
        fetched = page.evaluate("""() => fetch("https://example.com/x").then(
            () => "fetched", (e) => "refused: " + e.name)""")
        image = page.evaluate("""() => new Promise((done) => {
            const img = new Image();
            img.onload = () => done("loaded");
            img.onerror = () => done("refused");
            img.src = "https://example.com/pixel.png";
        })""")
        assert page.evaluate("() => window.__ran") == []
        assert fetched.startswith("refused") and image == "refused"
        violations = page.evaluate("() => window.__violations")
        assert any(v.startswith("script-src-elem inline") for v in violations), violations
        assert any(v.startswith("script-src-attr inline") for v in violations), violations
        assert any(v.startswith("connect-src https://example.com") for v in violations), violations
        assert any(v.startswith("img-src https://example.com") for v in violations), violations
        assert not [u for u in completed if u.startswith(("http:", "https:"))], completed
        assert not errors, errors
    finally:
        page.close()
