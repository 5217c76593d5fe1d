"""The version is written once, in thunderviz/__init__.py (pyproject.toml reads it through
hatch); the two npm packages cannot read it, so they are held to it here."""

from __future__ import annotations

import json
import pathlib

import pytest

import thunderviz

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("package", ["frontend/package.json", "extension/package.json"])
def test_npm_packages_carry_the_python_version(package):
    assert json.loads((ROOT / package).read_text())["version"] == thunderviz.__version__
