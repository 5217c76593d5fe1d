"""export_html: one self-contained file (no network), the document as escaped JSON data, the
viewer inlined, a static SVG for no-script readers; hostile names stay data."""

from __future__ import annotations

import json
import re

import pytest
import torch

from tests.widgets.models import EVIL, Hostile, mlp_inputs
from thunderviz.debug import Session
from thunderviz.viz import save
from thunderviz.widgets import export_html, show
from thunderviz.widgets import html_export as html_export_module
from thunderviz.widgets.html_export import json_for_script, render_html
from thunderviz.widgets.widget import viewer_bundle

# Namespace names, not references: the viewer creates SVG elements in this namespace and its
# sanitizer names the SVG DTD.
ALLOWED_URLS = (
    "http://www.w3.org/2000/svg",
    "http://www.w3.org/1999/xlink",
    "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd",
)

DOC_RE = re.compile(r'<script type="application/json" id="tv-doc">(.*?)</script>', re.S)
BUNDLE_RE = re.compile(r'<script type="text/plain" id="tv-bundle">(.*?)</script>', re.S)


def parts(page: str) -> tuple[str, str, str]:
    """(document JSON text, bundle text, everything else)."""
    doc = DOC_RE.search(page)
    bundle = BUNDLE_RE.search(page)
    assert doc and bundle
    rest = page.replace(doc.group(0), "").replace(bundle.group(0), "")
    return doc.group(1), bundle.group(1), rest


@pytest.fixture(scope="module")
def mlp_page(tmp_path_factory):
    model, x, target = mlp_inputs()
    path = export_html(model, tmp_path_factory.mktemp("html") / "mlp.html", x, target)
    return path.read_text(encoding="utf-8")


def test_the_page_is_self_contained(mlp_page):
    text = mlp_page
    for url in ALLOWED_URLS:
        text = text.replace(url, "")
    assert "http://" not in text and "https://" not in text
    assert not re.search(r"<(link|iframe|img|object|embed)\b", text, re.I)
    assert not re.search(r"<script[^>]*\bsrc=", text, re.I)
    assert not re.search(r"@import|url\((?!#)", parts(mlp_page)[2])
    _, bundle, rest = parts(mlp_page)
    assert bundle == viewer_bundle()  # the viewer, inlined as is
    assert rest.count("<script") == 2 and rest.count("</script>") == 2  # options, module


def test_the_document_is_embedded_as_json_with_recorded_steps(mlp_page):
    doc_text, _, _ = parts(mlp_page)
    assert "<" not in doc_text and ">" not in doc_text and "&" not in doc_text
    doc = json.loads(doc_text)
    assert doc["format"] == "thunderviz" and doc["title"] == "BlockMLP"
    n = len([o for o in doc["traces"]["backward"]["ops"] if o["parent"] is None])
    assert len(doc["steps"]) == n, "the backward is recorded step by step before export"
    assert doc["grad_flow"]


def test_there_is_a_static_picture_for_no_script_readers(mlp_page):
    noscript = re.search(r"<noscript>(.*?)</noscript>", mlp_page, re.S)
    assert noscript and "<svg" in noscript.group(1) and "xmlns" not in noscript.group(1)
    rest = parts(mlp_page)[2]
    assert "<?xml" not in rest and "<!DOCTYPE" not in rest


def test_a_hostile_module_name_is_only_ever_data(tmp_path):
    torch.manual_seed(0)
    path = export_html(Hostile(), tmp_path / "hostile.html", torch.randn(2, 4))
    page = path.read_text(encoding="utf-8")
    assert EVIL not in page  # not raw anywhere: not in the JSON, the SVG, the title
    doc_text, bundle, rest = parts(page)
    assert "<img" not in rest and "<img" not in doc_text
    assert "\\u003cimg src=x onerror=alert(1)\\u003e" in doc_text
    doc = json.loads(doc_text)
    assert f"{EVIL}.0" in {op["module_path"] for op in doc["traces"]["forward"]["ops"]}
    assert "&lt;img src=x onerror=alert(1)&gt;" in rest  # the SVG shows it as text
    assert "onerror=" not in rest.replace("&lt;img src=x onerror=alert(1)&gt;", "")


def test_json_for_script_cannot_end_the_tag():
    text = json_for_script({"a": "</script><script>alert(1)</script>", "b": "\u2028<!--", "c": "&"})
    assert "</" not in text and "<!--" not in text and "\u2028" not in text and "&" not in text
    assert json.loads(text) == {
        "a": "</script><script>alert(1)</script>",
        "b": "\u2028<!--",
        "c": "&",
    }
    with pytest.raises(ValueError):
        json_for_script({"x": float("nan")})


def test_the_title_is_escaped(mlp_page):
    model, x, target = mlp_inputs()
    doc = Session(model, x, target, title="<b onmouseover=alert(4)>t</b>").document()
    page = render_html(doc)
    assert "<title>&lt;b onmouseover=alert(4)&gt;t&lt;/b&gt; · thunderviz</title>" in page
    assert "<b onmouseover" not in page


def test_every_kind_of_source_exports(tmp_path):
    model, x, target = mlp_inputs()
    session = Session(model, x, target)
    exported = export_html(session, tmp_path / "session.html")
    assert len(json.loads(parts(exported.read_text())[0])["steps"]) == len(session.steps) > 0
    w = show(session)
    assert export_html(w, tmp_path / "widget.html").is_file()
    tvz = save(session, tmp_path / "s.tvz")
    from_tvz = export_html(tvz, tmp_path / "tvz.html", tab="backward")
    assert '"tab":"backward"' in from_tvz.read_text()
    assert export_html(session.document(), tmp_path / "doc.html", static=False).is_file()
    assert '<noscript><div class="tvx-static"><p>' in (tmp_path / "doc.html").read_text()
    with pytest.raises(TypeError):
        export_html(w, tmp_path / "x.html", x)


def test_a_bundle_that_cannot_be_inlined_is_refused(monkeypatch, mlp_page):
    monkeypatch.setattr(html_export_module, "viewer_bundle", lambda: "let s = '</script>';")
    model, x, target = mlp_inputs()
    with pytest.raises(RuntimeError, match="cannot be inlined"):
        render_html(Session(model, x, target).document())
