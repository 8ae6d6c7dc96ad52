"""A real Chromium for the results site's tests, driven by Playwright: Debian's `chromium`
(Playwright's own browser download is not needed). Without a browser the tests skip with the
install command; in CI (CI=true) they fail instead, as the PostgreSQL tests do."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import real_server
from tests.site_data import site_database

INSTALL = ("apt-get install chromium && pip install playwright (or set "
           "WEIGHTSEARCH_TEST_CHROMIUM to a Chromium binary)")
REQUIRED = os.environ.get("CI", "").lower() == "true"


def chromium_path() -> str | None:
    return os.environ.get("WEIGHTSEARCH_TEST_CHROMIUM") or shutil.which("chromium") or \
        shutil.which("chromium-browser")


def _missing(what: str) -> None:
    message = f"{what}: {INSTALL}"
    if REQUIRED:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("Playwright is not installed")
    binary = chromium_path()
    if binary is None:
        _missing("no Chromium found")
    with sync_playwright() as playwright:
        # --no-sandbox: CI and containers run as root, where Chromium's sandbox refuses to start
        launched = playwright.chromium.launch(executable_path=binary, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[tuple[str, str]]:
    """A served study database: (the site's base URL, the database URL)."""
    url = site_database(Path(tmp_path_factory.mktemp("site")))
    with real_server(url) as base:
        yield base, url
