"""The results site in a real browser: every page renders its charts without a console error or a
request beyond the server, a hostile study name stays text, the keyboard reaches the form, the
form's answer is the JSON route's, and the studies page follows a running study."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.site_data import HOSTILE, SEEDS, WEIGHTS

pytestmark = pytest.mark.browser
PAGES = ("/", "/ui/studies/demo", "/ui/studies/siwlm-paper", f"/ui/studies/{quote(HOSTILE)}",
         "/ui/recommend?train_size=5000", "/ui/across")


@dataclass
class Watched:
    """What a page did besides rendering: console errors, script errors, dialogs, requests."""

    base: str
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def outside(self) -> list[str]:
        return [u for u in self.requests if not u.startswith(self.base + "/")]


def _open(browser: Any, base: str) -> tuple[Any, Watched]:
    page = browser.new_page()
    watched = Watched(base)
    page.on("console", lambda m: watched.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: watched.errors.append(str(e)))
    page.on("dialog", lambda d: (watched.dialogs.append(d.message), d.dismiss()))
    page.on("request", lambda r: watched.requests.append(r.url))
    return page, watched


def test_every_page_renders_without_errors_or_requests_beyond_the_server(browser, site):
    base, _ = site
    page, watched = _open(browser, base)
    for path in PAGES:
        response = page.goto(base + path)
        assert response.status == 200, path
        page.wait_for_load_state("networkidle")
        assert page.locator("svg.chart, table").count() > 0, path
    assert watched.errors == [] and watched.dialogs == []
    assert watched.outside() == []
    assert any(u.endswith("/ui/static/ui.js") for u in watched.requests)  # scripts did load
    page.close()


def test_a_studys_curves_draw_each_seed_and_weight(browser, site):
    base, _ = site
    page, _ = _open(browser, base)
    page.goto(f"{base}/ui/studies/demo")
    assert page.locator("section.central").count() == 3
    assert page.locator("svg.chart circle.seed").count() == 3 * len(WEIGHTS) * len(SEEDS)
    assert page.locator("svg.chart line.seed-range").count() == 3 * len(WEIGHTS)
    cells = httpx.get(f"{base}/studies/demo/rte").json()["central_tasks"][0]["cells"]
    page.goto(f"{base}/ui/studies/demo/rte")
    assert page.locator("svg.chart circle.seed").count() == len(cells)
    page.close()


def test_a_hostile_study_name_shows_as_text(browser, site):
    base, _ = site
    page, watched = _open(browser, base)
    page.goto(base + "/")
    row = page.locator("#studies tr").filter(has_text="onerror")
    assert row.locator("th").inner_text() == HOSTILE
    assert page.locator("#studies img").count() == 0
    row.locator("th a").click()
    page.wait_for_load_state("networkidle")
    assert page.locator("h1 .name").inner_text() == HOSTILE
    assert page.locator("main img").count() == 0
    assert watched.dialogs == [] and watched.errors == []
    page.close()


def test_the_keyboard_reaches_the_form_and_its_answer_is_the_json_routes(browser, site):
    base, _ = site
    page, watched = _open(browser, base)
    page.goto(f"{base}/ui/recommend")
    for _ in range(20):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "train_size":
            break
    assert page.evaluate("document.activeElement.id") == "train_size"
    page.keyboard.type("5000")
    page.keyboard.press("Enter")
    page.wait_for_selector("#central-weight")
    answer = httpx.get(f"{base}/recommend", params={"train_size": 5000}).json()
    assert float(page.inner_text("#central-weight")) == answer["central_weight"]
    low, high = answer["interval"]
    assert page.inner_text("#interval") == f"{low:g} to {high:g}"
    assert page.locator("svg.bars rect.bar").count() == len(answer["evidence_shares"])
    page.fill("#train_size", "-4")
    page.keyboard.press("Enter")
    page.wait_for_selector(".problem")
    assert page.inner_text(".problem").startswith("train_size:")
    assert watched.errors == [error for error in watched.errors if "400" in error]
    page.close()


def test_the_across_page_draws_each_located_task(browser, site):
    base, _ = site
    page, _ = _open(browser, base)
    page.goto(f"{base}/ui/across")
    answer = httpx.get(f"{base}/recommend", params={"train_size": 100}).json()
    located = [e for e in answer["evidence"] if e.get("location") is not None]
    assert page.locator("figure svg.chart circle.regime").count() == len(located)
    assert page.locator("svg.chart polygon.law-band").count() == 1
    page.close()


def test_the_studies_page_follows_a_running_study_without_a_reload(browser, site):
    base, url = site
    page, watched = _open(browser, base)
    page.goto(base + "/")
    running = page.locator('#studies tr[data-study="demo"] td[data-field="running"]')
    assert running.inner_text() == "0"
    page.evaluate("window.loadedOnce = true")  # gone if the page reloads
    # a driver elsewhere starts a trial
    subprocess.run([sys.executable, "-c", "import optuna; optuna.logging.set_verbosity(30); "
                    f"optuna.load_study(study_name='demo/rte', storage={url!r}).ask()"],
                   check=True, timeout=120)
    for _ in range(120):  # polls, not a clock: the page asks every 5 s
        if running.inner_text() == "1":
            break
        page.wait_for_timeout(500)
    demo = [s for s in httpx.get(f"{base}/studies").json()["studies"] if s["study"] == "demo"]
    assert running.inner_text() == "1", (demo, watched.errors)
    assert page.evaluate("window.loadedOnce") is True
    assert watched.errors == []
    page.close()
