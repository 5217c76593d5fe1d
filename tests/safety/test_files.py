"""Files are never lost: writes are atomic and always valid UTF-8, loads refuse what is not
a regular file of a sane size."""

from __future__ import annotations

import json
import os
import threading

import pytest
import torch

import thunderviz as tv
import thunderviz.viz.files as files
from tests.safety.hostile import Holder

SURROGATE_NAME = "a\ud800b"  # a str can hold a lone surrogate; UTF-8 cannot encode it


@pytest.fixture(scope="module")
def surrogate_doc():
    torch.manual_seed(0)
    session = tv.Session(Holder(key=SURROGATE_NAME), torch.randn(2, 3))
    doc = session.document()
    assert SURROGATE_NAME in json.dumps(doc, ensure_ascii=False)
    return doc


def _assert_untouched(path, old: bytes) -> None:
    assert path.read_bytes() == old
    assert sorted(os.listdir(path.parent)) == [path.name], "no temporary file left behind"


def test_save_with_lone_surrogate_writes_valid_utf8_and_reads_back(tmp_path, surrogate_doc):
    path = tmp_path / "run.tvz"
    tv.save(surrogate_doc, path)
    path.read_bytes().decode("utf-8")  # strict: raises on invalid UTF-8
    # Python's json (the reference) reads the file back to the very same document.
    assert tv.load(path) == json.loads(json.dumps(surrogate_doc))


def test_export_html_with_lone_surrogate_writes_valid_utf8(tmp_path, surrogate_doc):
    path = tmp_path / "run.html"
    tv.export_html(surrogate_doc, path)
    text = path.read_bytes().decode("utf-8")
    start = text.index('<script type="application/json" id="tv-doc">') + len(
        '<script type="application/json" id="tv-doc">'
    )
    embedded = json.loads(text[start : text.index("</script>", start)])
    assert embedded == json.loads(json.dumps(surrogate_doc))


@pytest.mark.parametrize("writer", ["save", "export_html"])
def test_failed_write_leaves_the_old_file(tmp_path, surrogate_doc, monkeypatch, writer):
    path = tmp_path / ("run.tvz" if writer == "save" else "run.html")
    path.write_bytes(b"the old contents")
    old = path.read_bytes()

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        getattr(tv, writer)(surrogate_doc, path)
    _assert_untouched(path, old)


def test_invalid_document_leaves_the_old_file(tmp_path):
    path = tmp_path / "run.tvz"
    path.write_bytes(b"the old contents")
    with pytest.raises(tv.TvzError):
        tv.save({"format": "thunderviz", "version": 1, "traces": {}}, path)
    _assert_untouched(path, b"the old contents")


def test_write_keeps_permissions(tmp_path, surrogate_doc):
    path = tmp_path / "run.tvz"
    path.write_bytes(b"x")
    os.chmod(path, 0o640)
    tv.save(surrogate_doc, path)
    assert (os.stat(path).st_mode & 0o777) == 0o640


def test_load_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.tvz"
    os.mkfifo(fifo)
    result: list[BaseException] = []
    reader = threading.Thread(target=lambda: result.append(_load_error(fifo)), daemon=True)
    reader.start()
    reader.join(timeout=60)
    if reader.is_alive():  # unblock the reader so the test process can end, then fail
        with open(fifo, "wb"):
            pass
        pytest.fail("load() blocked on a FIFO")
    assert isinstance(result[0], tv.TvzError) and "not a regular file (a FIFO)" in str(result[0])


def _load_error(path) -> BaseException | None:
    try:
        tv.load(path)
    except BaseException as e:  # noqa: BLE001 - handed to the test thread
        return e
    return None


def test_load_refuses_a_folder(tmp_path):
    with pytest.raises(tv.TvzError, match="a folder"):
        tv.load(tmp_path)


def test_load_size_limit_is_clear_and_configurable(tmp_path, surrogate_doc):
    path = tmp_path / "run.tvz"
    tv.save(surrogate_doc, path)
    size = path.stat().st_size
    with pytest.raises(tv.TvzError, match=rf"{size} bytes, more than the limit of 100.*max_bytes"):
        tv.load(path, max_bytes=100)
    assert tv.load(path, max_bytes=size)["format"] == "thunderviz"


def test_write_goes_through_a_symbolic_link(tmp_path, surrogate_doc):
    real = tmp_path / "real.tvz"
    real.write_bytes(b"old")
    link = tmp_path / "link.tvz"
    link.symlink_to(real)
    tv.save(surrogate_doc, link)
    assert link.is_symlink() and tv.load(real)["format"] == "thunderviz"


def test_a_new_file_gets_the_usual_permissions(tmp_path, surrogate_doc):
    plain = tmp_path / "plain"
    plain.write_bytes(b"")  # what open() makes under this process's umask
    tv.save(surrogate_doc, tmp_path / "new.tvz")
    assert (os.stat(tmp_path / "new.tvz").st_mode & 0o777) == (os.stat(plain).st_mode & 0o777)
