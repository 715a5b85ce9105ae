"""`runner serve` in a real headless Chromium: tiles, picking, a gate decision, live iterate.

The server and the browser are tests/conftest.py's ``served`` and ``browser`` fixtures (uvicorn
in a thread on a free 127.0.0.1 port; skipped when Debian's chromium or chromium-driver is not
installed). Screenshots go to $RUNNER_SCREENS (default tests/web_screens/, gitignored).
"""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from tests.surfaces.test_web_api import Site, build_site
from tests.webdriving import needs_browser, shot, start_iterate, wait

pytestmark = needs_browser
webdriver = pytest.importorskip("selenium.webdriver")

from selenium.webdriver.common.by import By  # noqa: E402


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    return build_site(tmp_path_factory.mktemp("browser"))


def test_the_login_url_leaves_an_httponly_cookie(served: Any, browser: Any) -> None:
    # the browser fixture opened the printed login URL: the token left the address bar
    browser.get(f"{served.url}/")
    assert "token" not in browser.current_url
    assert not browser.execute_script("return document.cookie")  # HttpOnly
    assert browser.find_elements(By.ID, "runs")


def picked_ordinals(site: Site, run_id: str) -> list[int]:
    doc = json.loads(site.cli("runs", "show", run_id, "--json").stdout)
    return [it["ordinal"] for it in doc["iterations"] if it["picked"]]


def test_pick_in_the_grid_moves_the_star(site: Site, served: Any, browser: Any) -> None:
    browser.get(f"{served.url}/runs/{site.hero}")
    tiles = browser.find_elements(By.CSS_SELECTOR, "#grid .tile")
    assert [t.get_attribute("data-ordinal") for t in tiles] == ["1", "2", "3", "4"]
    wait(
        browser,
        lambda d: all(
            d.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img)
            for img in d.find_elements(By.CSS_SELECTOR, "#grid img")
        ),
    )
    assert not any(t.find_element(By.CLASS_NAME, "star").is_displayed() for t in tiles)
    shot(browser, "run-before-pick")
    for ordinal in (2, 3):
        browser.find_element(By.CSS_SELECTOR, f"#tile-{ordinal} button.pick").click()
        wait(
            browser,
            lambda d, o=ordinal: (
                "picked" in d.find_element(By.ID, f"tile-{o}").get_attribute("class")
            ),
        )
        stars = [
            t.get_attribute("data-ordinal")
            for t in browser.find_elements(By.CSS_SELECTOR, "#grid .tile")
            if t.find_element(By.CLASS_NAME, "star").is_displayed()
        ]
        assert stars == [str(ordinal)]
        assert picked_ordinals(site, site.hero) == [ordinal]
        assert f"picked #{ordinal}" in browser.find_element(By.ID, "flash").text
    shot(browser, "run-picked")
    browser.refresh()  # the server-rendered page agrees after a reload
    assert "picked" in browser.find_element(By.ID, "tile-3").get_attribute("class")


def test_iterate_from_a_tile_follows_the_child_live(site: Site, served: Any, browser: Any) -> None:
    browser.get(f"{served.url}/runs/{site.hero}")
    child = start_iterate(browser, 1, n=2, prompt_append="warmer colours")
    # the page follows the run's events and reloads when it ends: two tiles appear
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#grid .tile")) == 2, 30)
    assert browser.find_element(By.ID, "run-status").text == "completed"
    doc = json.loads(site.cli("runs", "show", child, "--json").stdout)
    assert doc["run"]["parent_run_id"] == site.hero
    assert doc["run"]["params"]["prompt_append"] == "warmer colours"
    shot(browser, "run-child")


def test_export_from_the_page(site: Site, served: Any, browser: Any) -> None:
    browser.get(f"{served.url}/runs/{site.hero}")
    box = browser.find_element(By.ID, "export-to")
    box.clear()
    box.send_keys("browser-out")
    browser.find_element(By.ID, "export-all").click()
    wait(browser, lambda d: "wrote 4 file(s)" in d.find_element(By.ID, "flash").text)
    assert sorted(p.name for p in (site.project.root / "browser-out").iterdir()) == [
        f"dQw4w9WgXcQ-{i}.jpg" for i in (1, 2, 3, 4)
    ]
    shutil.rmtree(site.project.root / "browser-out")


def test_gate_card_approves(site: Site, served: Any, browser: Any) -> None:
    browser.get(f"{served.url}/runs/{site.gated}")
    card = browser.find_element(By.ID, "gate-review")
    assert "Publish this draft?" in card.text
    shot(browser, "run-gate")
    card.find_element(By.CLASS_NAME, "gate-comment").send_keys("looks right")
    card.find_element(By.CLASS_NAME, "gate-by").send_keys("grace")
    card.find_element(By.CSS_SELECTOR, "button.approve").click()
    decided = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#gate-review .decided"))
    assert "approve by grace" in decided[0].text and "the run continues" in decided[0].text
    rows = json.loads(site.cli("runs", "decisions", site.gated, "--json").stdout)["decisions"]
    assert (rows[-1]["decision"], rows[-1]["by"], rows[-1]["comment"]) == (
        "approve",
        "grace",
        "looks right",
    )
    # the run goes on by itself and the page follows it live (no manual reload)
    wait(browser, lambda d: d.find_element(By.ID, "run-status").text == "completed", 30)
    shot(browser, "run-gate-approved")
    shown = json.loads(site.cli("runs", "show", site.gated, "--json").stdout)
    assert shown["run"]["status"] == "completed"
    # when the run ends the page reloads itself, and the decided gate's card is gone
    wait(browser, lambda d: not d.find_elements(By.ID, "gate-review"), 30)
    assert browser.find_element(By.ID, "run-status").text == "completed"


def test_list_pages_render(site: Site, served: Any, browser: Any) -> None:
    browser.get(f"{served.url}/")
    rows = browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr")
    assert {r.get_attribute("data-run") for r in rows} >= {site.hero, site.gated, site.gated2}
    shot(browser, "runs")
    browser.get(f"{served.url}/?awaiting=1")
    rows = browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr")
    awaiting = {r.get_attribute("data-run") for r in rows}
    assert site.gated2 in awaiting and site.hero not in awaiting
    browser.get(f"{served.url}/steps")
    assert "template" in browser.find_element(By.ID, "step-types").text
    shot(browser, "steps")
    browser.get(f"{served.url}/providers")
    assert "fake" in browser.find_element(By.ID, "providers").text
    shot(browser, "providers")


def test_step_output_loads_when_opened(site: Site, served: Any, browser: Any) -> None:
    browser.get(f"{served.url}/runs/{site.hero}")
    box = browser.find_element(By.CSS_SELECTOR, 'details.lazy-out[data-step="prompt"]')
    assert box.find_element(By.TAG_NAME, "pre").text == ""
    box.find_element(By.TAG_NAME, "summary").click()
    # it opens in a row of its own under the step (tests/surfaces/test_web_page_ii.py)
    wait(browser, lambda d: "A striking" in d.find_element(By.CSS_SELECTOR, "#out-prompt pre").text)
