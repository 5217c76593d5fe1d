"""Fixtures for real-browser tests: a JupyterLab server, Debian's Chromium, a lab page.

Reuse them in any browser test under ``tests/browser/`` (mark the test
``@pytest.mark.browser``):

- ``jupyterlab_server`` (session): a running JupyterLab of our own (``lab_server.JupyterLab``).
  ``url, token, root_dir = jupyterlab_server`` unpacks it; files written under ``root_dir``
  show in its file browser; ``.api("api/kernels")`` calls its REST API. It serves the
  checkout's built thunderviz lab extension (``thunderviz/labextension``, from
  ``make extension``) when that exists; ``THUNDERVIZ_LABEXTENSION_DIR`` names another build.
- ``browser_context`` (session): a Playwright ``BrowserContext`` of headless Debian Chromium.
- ``lab_page``: a ``LabPage`` (the Playwright ``page`` plus helpers), loaded in a workspace
  of its own so no tab of an earlier test is restored; on failure it saves a screenshot to
  ``test-artifacts/`` and reports the page's console errors.
- ``lab_dir``: a fresh folder under the server's root for one test's files, as
  ``(absolute Path, path relative to the server root)``.
- ``thunderviz_lab``: like ``jupyterlab_server``, but fails at once, and says why, when the
  thunderviz extension is not built or not loaded.

Documents and notebooks come from the real Python side: ``real_document`` (session),
``real_tvz`` and ``real_notebook`` (in the test's ``lab_dir``), all through
``make_real_document()`` / ``REAL_PROGRAM`` below.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from lab_server import (
    REPO_ROOT,
    JupyterLab,
    chromium,
    current_widget_info,
    open_from_file_browser,
    open_lab,
    screenshot,
    wait_for_kernel,
)

MIME_TYPE = "application/vnd.thunderviz.view+json"
LABEXTENSION_DIR = Path(
    os.environ.get("THUNDERVIZ_LABEXTENSION_DIR") or REPO_ROOT / "thunderviz" / "labextension"
)


# -- documents and notebooks from the real Python side ----------------------------------

# One small real program: a two-layer MLP, traced and differentiated by thunderviz.
# `make_real_document` runs it in this process; `make_real_notebook` runs it in a notebook
# cell (nbclient, a real kernel), so both kinds of test see the same program. `tanh` runs
# at the root module, so the graph has op nodes outside any (collapsible) module.
#
# The program leaves the view document (docs/view-format.md) in `document`: a Session with
# its backward recorded (steps, statistics, gradient flow). SHOW_VIEW displays the debugger
# widget for the same session: in a notebook that is two outputs, the static twin (the view
# MIME application/vnd.thunderviz.view+json, SVG, text) and the widget view
# (thunderviz/widgets/widget.py explains why).
REAL_PROGRAM = """\
import torch
import thunderviz
from thunderviz.debug import Session
from thunderviz.widgets import show


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 2)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        return self.fc2(h)


torch.manual_seed(0)
model = MLP()
x = torch.randn(3, 4)
session = Session(model, x, title="MLP", cotangents=torch.ones(3, 2))
session.record_backward()
document = session.document()
"""
SHOW_VIEW = "show(session)\n"


def _not_wired(helper: str, error: BaseException) -> None:
    pytest.fail(
        f"{helper} failed (REAL_PROGRAM / SHOW_VIEW in tests/browser/conftest.py use "
        f"thunderviz's Session, show and save): {type(error).__name__}: {error}",
        pytrace=False,
    )


def make_real_document() -> dict:
    """The view document of ``REAL_PROGRAM``, made by thunderviz in this process."""
    namespace: dict[str, Any] = {"__name__": "real_program"}
    try:
        exec(compile(REAL_PROGRAM, "<REAL_PROGRAM>", "exec"), namespace)
    except (ImportError, AttributeError, TypeError) as error:
        _not_wired("make_real_document()", error)
    document = namespace["document"]
    if not isinstance(document, dict):  # a view object that knows its JSON form
        document = json.loads(json.dumps(document, default=lambda o: o.to_json()))
    assert document.get("format") == "thunderviz", "REAL_PROGRAM did not make a view document"
    return document


def save_real_tvz(path: Path) -> dict:
    """Write the real document to ``path`` with ``thunderviz.save``; return the document
    as read back from the file (plain JSON)."""
    import thunderviz.viz

    document = make_real_document()
    try:
        thunderviz.viz.save(document, path)
    except (AttributeError, TypeError) as error:
        _not_wired("save_real_tvz()", error)
    return json.loads(Path(path).read_text(encoding="utf-8"))


def make_real_notebook(path: Path, timeout: float = 120.0) -> Any:
    """Execute a notebook that runs ``REAL_PROGRAM`` and shows the view (nbclient, a real
    kernel), save it to ``path`` and return it (an ``nbformat`` notebook).

    The saved notebook is not trusted by the test server (nothing signed it), as when a
    user opens a notebook from somewhere else: its outputs must render all the same.
    """
    import nbclient
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    notebook.cells.append(nbformat.v4.new_code_cell(REAL_PROGRAM + SHOW_VIEW))
    client = nbclient.NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=timeout,
        store_widget_state=True,
        resources={"metadata": {"path": str(Path(path).parent)}},
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as error:
        _not_wired("make_real_notebook()", error)
    nbformat.write(notebook, str(path))
    return notebook


# -- servers, browsers, pages ------------------------------------------------------------


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    # Keep each phase's report on the item, so fixtures can tell in teardown whether the
    # test failed (and save a screenshot then).
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def jupyterlab_server(tmp_path_factory):
    """A running JupyterLab; see the module docstring."""
    base = tmp_path_factory.mktemp("jupyterlab")
    labextensions = {}
    if (LABEXTENSION_DIR / "package.json").is_file():
        labextensions["thunderviz"] = LABEXTENSION_DIR
    lab = JupyterLab.start(base / "root", base / "state", labextensions=labextensions)
    try:
        yield lab
    finally:
        lab.stop()


@pytest.fixture(scope="session")
def thunderviz_lab(jupyterlab_server):
    """The JupyterLab server, checked to load the built thunderviz extension."""
    if not (LABEXTENSION_DIR / "package.json").is_file():
        pytest.fail(
            f"the thunderviz lab extension is not built: no {LABEXTENSION_DIR}/package.json. "
            "Build it with `make extension`.",
            pytrace=False,
        )
    loaded = jupyterlab_server.federated_extensions().get("thunderviz")
    built = json.loads((LABEXTENSION_DIR / "package.json").read_text())["jupyterlab"]["_build"]
    if loaded is None or loaded.get("load") != built["load"]:
        pytest.fail(
            f"JupyterLab does not load the thunderviz extension built in {LABEXTENSION_DIR} "
            f"(page config: {loaded}; build: {built}); server log:\n"
            f"{jupyterlab_server.log_tail()}",
            pytrace=False,
        )
    return jupyterlab_server


@pytest.fixture(scope="session")
def browser_context(tmp_path_factory):
    """Headless Debian Chromium (never `playwright install`), one profile per session."""
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as context:
        context.set_default_timeout(30_000)
        yield context


def slug(name: str) -> str:
    """A short name made of letters, digits and dashes (for folders, workspaces, files)
    that still tells the test apart from its siblings."""
    digest = hashlib.sha1(name.encode()).hexdigest()[:6]
    return f"{re.sub(r'[^A-Za-z0-9]+', '-', name).strip('-')[:60]}-{digest}"


@dataclass
class LabPage:
    """A lab page in a workspace of its own, with the helpers browser tests need."""

    page: Any  # playwright.sync_api.Page
    lab: JupyterLab
    name: str
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions

    def open(self, path: str) -> Any:
        """Open ``path`` (relative to the server root) by double-clicking it in the file
        browser: the file browser goes to its folder first. Returns the new tab's locator."""
        folder, _, name = path.rstrip("/").rpartition("/")
        self.go_to_folder(folder)
        return open_from_file_browser(self.page, name)

    def go_to_folder(self, folder: str) -> None:
        """Show ``folder`` (relative to the server root, "" for the root) in the file browser."""
        self.page.evaluate(
            """async folder => {
                const app = window.jupyterapp;
                await app.commands.execute('filebrowser:go-to-path', {path: '/' + folder});
                await app.commands.execute('filebrowser:refresh');
            }""",
            folder,
        )
        self.page.wait_for_function(
            """folder => {
                const el = document.querySelector('.jp-FileBrowser .jp-BreadCrumbs');
                const last = folder.split('/').filter(Boolean).pop();
                return !last || (el && el.textContent.includes(last));
            }""",
            arg=folder,
        )

    def current_widget(self) -> dict:
        """Label, class names, path and default factory of the current main-area tab."""
        return current_widget_info(self.page)

    def wait_for_kernel(self) -> None:
        wait_for_kernel(self.page)

    def screenshot(self, tag: str = "") -> Path:
        """Save ``test-artifacts/<test name>[-tag].png``."""
        return screenshot(self.page, f"{self.name}-{tag}" if tag else self.name)


@pytest.fixture
def lab_page(request, jupyterlab_server, browser_context):
    """A fresh lab page; screenshot and console errors in the report when the test fails."""
    name = slug(request.node.name)
    page = browser_context.new_page()
    lab_page = LabPage(page=page, lab=jupyterlab_server, name=name)
    page.on("pageerror", lambda error: lab_page.errors.append(f"uncaught: {error}"))
    page.on(
        "console",
        lambda message: (
            lab_page.errors.append(f"console.{message.type}: {message.text}")
            if message.type == "error"
            else None
        ),
    )
    open_lab(page, jupyterlab_server, workspace=name)
    try:
        yield lab_page
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            try:
                shot = lab_page.screenshot("failure")
                report.sections.append(("browser screenshot", str(shot)))
            except Exception as error:  # the page may be gone; the report matters more
                report.sections.append(("browser screenshot", f"failed: {error}"))
            if lab_page.errors:
                report.sections.append(("browser console errors", "\n".join(lab_page.errors)))
        page.close()


@pytest.fixture(scope="session")
def real_document():
    """The real view document (``make_real_document``), made once a session."""
    return make_real_document()


@pytest.fixture
def lab_dir(request, jupyterlab_server):
    """A fresh folder under the server root for this test's files: (path, relative path)."""
    name = slug(request.node.name)
    path = jupyterlab_server.root_dir / name
    path.mkdir(parents=True, exist_ok=False)
    return path, name


@pytest.fixture
def real_tvz(lab_dir):
    """``mlp.tvz`` in this test's folder, written by ``thunderviz.save``:
    (path relative to the server root, the document read back from the file)."""
    folder, relative = lab_dir
    document = save_real_tvz(folder / "mlp.tvz")
    return f"{relative}/mlp.tvz", document


@pytest.fixture
def real_program_file(lab_dir):
    """``REAL_PROGRAM`` written to ``real_program.py`` in this test's folder and run from
    there, so its ops' source file is one the lab server can open: (the module, whose
    ``document`` is the view, path of the file relative to the server root, the program)."""
    folder, relative = lab_dir
    source = folder / "real_program.py"
    source.write_text(REAL_PROGRAM)
    spec = importlib.util.spec_from_file_location("real_program", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, f"{relative}/real_program.py", REAL_PROGRAM


@pytest.fixture
def real_notebook(lab_dir):
    """``mlp.ipynb`` in this test's folder, executed by nbclient and saved:
    (path relative to the server root, the notebook as saved)."""
    folder, relative = lab_dir
    notebook = make_real_notebook(folder / "mlp.ipynb")
    return f"{relative}/mlp.ipynb", notebook
