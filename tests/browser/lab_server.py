"""A real JupyterLab server and a real Chromium for browser tests.

Plain functions and classes, no pytest in here: ``conftest.py`` wraps them in fixtures, and
a script can use them directly (``python -m`` style debugging of a failing browser test).

    with JupyterLab.start(root_dir, state_dir) as lab:     # own ports, token, config dirs
        with chromium(profile_dir) as context:             # Debian's Chromium, headless
            page = context.new_page()
            open_lab(page, lab)                            # a fresh workspace, app ready
            open_from_file_browser(page, "model.tvz")      # double-click, like a person

Facts this relies on (measured on the machines the tests run on):
- as root, ``jupyter lab`` needs ``--allow-root``;
- ``--LabApp.expose_app_in_browser=True`` makes ``window.jupyterapp`` available to tests;
- the "Jupyter news?" toast is turned off by a settings file, not a flag;
- Playwright refuses ``--user-data-dir`` in ``args``: use ``launch_persistent_context``;
- never ``playwright install`` (no browser downloads here): Debian's ``/usr/bin/chromium``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS_DIR = REPO_ROOT / "test-artifacts"

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LabAddress(NamedTuple):
    """Where a running JupyterLab is: unpacks as ``url, token, root_dir = lab.address``."""

    url: str  # http://127.0.0.1:<port>, no trailing slash, no token
    token: str
    root_dir: Path  # the server's contents root: files written here show in the file browser


@dataclass
class JupyterLab:
    """A JupyterLab server process of our own, isolated from the user's Jupyter setup.

    Every Jupyter/JupyterLab directory (config, data, runtime, settings, workspaces,
    IPython) lives under ``state_dir``, so nothing is read from or written to ``$HOME``, and
    the only lab extensions beyond the venv's are the ones passed in ``labextensions``.
    """

    address: LabAddress
    process: subprocess.Popen
    state_dir: Path
    log_path: Path
    env: dict[str, str] = field(repr=False)

    def __iter__(self):
        """``url, token, root_dir = lab``."""
        return iter(self.address)

    @property
    def url(self) -> str:
        return self.address.url

    @property
    def token(self) -> str:
        return self.address.token

    @property
    def root_dir(self) -> Path:
        return self.address.root_dir

    @classmethod
    def start(
        cls,
        root_dir: Path,
        state_dir: Path,
        *,
        labextensions: Mapping[str, Path] | None = None,
        extra_args: tuple[str, ...] = (),
        extra_env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> JupyterLab:
        """Start ``jupyter lab`` serving ``root_dir`` and wait until it answers.

        ``labextensions`` maps a prebuilt extension's name to its build folder (the one with
        ``package.json`` and ``static/``, e.g. ``thunderviz/labextension``). They are linked
        into a folder passed as ``LabApp.extra_labextensions_path``, which JupyterLab
        searches before the environment's ``share/jupyter/labextensions``: the server shows
        the checkout's build even where an older copy is installed in the venv.
        """
        root_dir = Path(root_dir).resolve()
        state_dir = Path(state_dir).resolve()
        root_dir.mkdir(parents=True, exist_ok=True)
        dirs = {
            name: state_dir / name
            for name in ("config", "data", "runtime", "settings", "workspaces", "ipython", "ext")
        }
        for path in dirs.values():
            path.mkdir(parents=True, exist_ok=True)

        for name, build_dir in (labextensions or {}).items():
            build_dir = Path(build_dir).resolve()
            if not (build_dir / "package.json").is_file():
                raise FileNotFoundError(
                    f"lab extension {name!r}: no package.json in {build_dir}; build it first "
                    "(`make extension`)"
                )
            link = dirs["ext"] / name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(build_dir, target_is_directory=True)

        # No "Jupyter news?" toast and no update check: both would reach the network and
        # the toast covers part of the page.
        notification = dirs["settings"] / "@jupyterlab" / "apputils-extension"
        notification.mkdir(parents=True, exist_ok=True)
        (notification / "notification.jupyterlab-settings").write_text(
            json.dumps({"fetchNews": "false", "checkForUpdates": False})
        )

        # The same for the server side of news and update checks.
        (dirs["config"] / "jupyter_server_config.json").write_text(
            json.dumps(
                {
                    "LabApp": {
                        "news_url": None,
                        "check_for_updates_class": "jupyterlab.NeverCheckForUpdate",
                    }
                }
            )
        )

        env = dict(os.environ)
        env.update(
            JUPYTER_CONFIG_DIR=str(dirs["config"]),
            JUPYTER_DATA_DIR=str(dirs["data"]),
            JUPYTER_RUNTIME_DIR=str(dirs["runtime"]),
            JUPYTERLAB_SETTINGS_DIR=str(dirs["settings"]),
            JUPYTERLAB_WORKSPACES_DIR=str(dirs["workspaces"]),
            IPYTHONDIR=str(dirs["ipython"]),
            # Kernels started by the server run this Python (the venv), whatever PATH says.
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        )
        env.pop("JUPYTER_PATH", None)
        if extra_env:
            env.update(extra_env)

        port = free_port()
        token = secrets.token_hex(16)
        cmd = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--allow-root",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root_dir}",
            "--LabApp.expose_app_in_browser=True",
            f"--LabApp.extra_labextensions_path={dirs['ext']}",
            *extra_args,
        ]
        log_path = state_dir / "jupyterlab.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                cmd,
                cwd=root_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        lab = cls(
            address=LabAddress(f"http://127.0.0.1:{port}", token, root_dir),
            process=process,
            state_dir=state_dir,
            log_path=log_path,
            env=env,
        )
        try:
            lab._wait_until_ready(timeout)
        except BaseException:
            lab.stop()
            raise
        return lab

    def __enter__(self) -> JupyterLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- talking to the server ----------------------------------------------------------

    def api(self, path: str, method: str = "GET", body: Any = None, timeout: float = 10.0):
        """Call the server's REST API (``/api/...``) with the token; returns parsed JSON."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}/{path.lstrip('/')}",
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode()
        return json.loads(text) if text else None

    def lab_url(self, path: str = "", *, workspace: str | None = None, reset: bool = True) -> str:
        """URL of the lab page (with the token), in a workspace of its own if named.

        A fresh workspace name with ``reset`` gives a page with no tabs restored from
        earlier tests.
        """
        base = f"{self.url}/lab"
        if workspace:
            base += f"/workspaces/{workspace}"
        if path:
            base += f"/tree/{path.lstrip('/')}"
        query = f"token={self.token}" + ("&reset" if reset else "")
        return f"{base}?{query}"

    def page_config(self) -> dict:
        """The page config the lab page would get (lists the federated extensions it loads)."""
        request = urllib.request.Request(
            f"{self.url}/lab", headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            html = response.read().decode()
        match = re.search(
            r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
            html,
            re.S,
        )
        if not match:
            raise RuntimeError("no jupyter-config-data in the lab page")
        return json.loads(match.group(1))

    def federated_extensions(self) -> dict[str, dict]:
        """Prebuilt extensions the lab page loads, by name."""
        return {ext["name"]: ext for ext in self.page_config().get("federated_extensions", [])}

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    # -- lifecycle ----------------------------------------------------------------------

    def _wait_until_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"jupyter lab exited with code {self.process.returncode} before it "
                    f"answered; its log ({self.log_path}):\n{self.log_tail()}"
                )
            with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
                self.api("api/status", timeout=2)
                return
            time.sleep(0.2)
        raise TimeoutError(
            f"jupyter lab did not answer on {self.url} within {timeout:.0f} s; its log "
            f"({self.log_path}):\n{self.log_tail()}"
        )

    def stop(self, timeout: float = 15.0) -> None:
        """Shut down its kernels, then stop the server by its PID (SIGTERM, then SIGKILL)."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(Exception):
            for kernel in self.api("api/kernels", timeout=5) or []:
                with contextlib.suppress(Exception):
                    self.api(f"api/kernels/{kernel['id']}", method="DELETE", timeout=10)
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


# -- Chromium ---------------------------------------------------------------------------


@contextlib.contextmanager
def chromium(profile_dir: Path, **context_options: Any) -> Iterator[Any]:
    """A headless Debian Chromium as a Playwright ``BrowserContext`` with its own profile."""
    from playwright.sync_api import sync_playwright

    options: dict[str, Any] = {"viewport": {"width": 1400, "height": 900}}
    options.update(context_options)
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile_dir),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            **options,
        )
        try:
            yield context
        finally:
            context.close()


# -- driving the lab page ---------------------------------------------------------------


def open_lab(page: Any, lab: JupyterLab, *, workspace: str, timeout: float = 60.0) -> None:
    """Load the lab page in a fresh workspace and wait until the app has started and
    restored its layout, with the file browser listing."""
    page.goto(lab.lab_url(workspace=workspace), timeout=timeout * 1000)
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=timeout * 1000)
    page.evaluate(
        "async () => { await window.jupyterapp.started; await window.jupyterapp.restored; }"
    )
    page.locator(".jp-DirListing-content").wait_for(state="visible", timeout=timeout * 1000)


def refresh_file_browser(page: Any) -> None:
    """Make the file browser list files written since the page loaded."""
    page.evaluate("() => window.jupyterapp.commands.execute('filebrowser:refresh')")


def file_browser_item(page: Any, name: str) -> Any:
    """The file browser row of ``name`` (a file or folder in the current folder)."""
    return page.locator(".jp-DirListing-item").filter(
        has=page.locator(".jp-DirListing-itemText", has_text=re.compile(rf"^{re.escape(name)}$"))
    )


def open_from_file_browser(page: Any, name: str, timeout: float = 30.0) -> Any:
    """Double-click ``name`` in the file browser, like a person; return the new tab's
    content locator (the main-area widget that became current)."""
    before = page.evaluate("() => window.jupyterapp.shell.currentWidget?.id ?? null")
    item = file_browser_item(page, name)
    if item.count() == 0:
        refresh_file_browser(page)
    item.first.wait_for(state="visible", timeout=timeout * 1000)
    item.first.dblclick()
    page.wait_for_function(
        """([before, name]) => {
            const w = window.jupyterapp.shell.currentWidget;
            return w && w.id !== before && w.title.label === name;
        }""",
        arg=[before, name],
        timeout=timeout * 1000,
    )
    widget_id = page.evaluate("() => window.jupyterapp.shell.currentWidget.id")
    return page.locator(f'[id="{widget_id}"]')


def current_widget_info(page: Any) -> dict:
    """What the current main-area tab is: its label, its and its content's class names,
    and for a document its path and the default widget factory for that path."""
    return page.evaluate(
        """() => {
            const app = window.jupyterapp;
            const w = app.shell.currentWidget;
            if (!w) return null;
            const path = w.context ? w.context.path : null;
            const factory = path === null ? null : app.docRegistry.defaultWidgetFactory(path);
            return {
                id: w.id,
                label: w.title.label,
                className: w.node.className,
                contentClassName: w.content ? w.content.node.className : null,
                path,
                defaultFactory: factory ? factory.name : null,
            };
        }"""
    )


def wait_for_kernel(page: Any, timeout: float = 60.0) -> None:
    """Wait until the current notebook's kernel has answered ``kernel_info``: before that,
    Shift+Enter silently does nothing (measured)."""
    page.wait_for_function(
        """() => {
            const w = window.jupyterapp.shell.currentWidget;
            const kernel = w && w.sessionContext && w.sessionContext.session
                && w.sessionContext.session.kernel;
            return !!(kernel && kernel.info);
        }""",
        timeout=timeout * 1000,
    )
    page.evaluate(
        "async () => { await window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.info; }"
    )


def screenshot(page: Any, name: str) -> Path:
    """Save a full-page screenshot to ``test-artifacts/<name>.png`` at the repo root."""
    ARTIFACTS_DIR.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "screenshot"
    path = ARTIFACTS_DIR / f"{safe}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def click_node(node: Any) -> None:
    """Click a viewer graph node on its shape, left of its label (its ▸ glyph expands instead)."""
    node.scroll_into_view_if_needed()
    shape = node.locator("path, polygon, ellipse").first
    box = shape.bounding_box()
    shape.click(position={"x": 5, "y": box["height"] / 2})


def toggle(container: Any, ident: str) -> None:
    """Click the ▸ / ▾ glyph of a viewer node or cluster."""
    glyph = container.locator(f'[data-tv-id="{ident}"] > text .tv-toggle').first
    glyph.scroll_into_view_if_needed()
    glyph.click()


def open_exported(context: Any, path: Path, *, timeout_ms: float = 60_000) -> Any:
    """A new 1400×900 page of the exported viewer at `path`, once both graph panes (forward
    and backward) are drawn."""
    page = context.new_page()
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(path.resolve().as_uri())
    for kind in ("forward", "backward"):
        page.wait_for_selector(
            f'.tv-graph-pane[data-tv-graph="{kind}"][data-tv-ready="true"]', timeout=timeout_ms
        )
    return page
