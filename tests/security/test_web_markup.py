"""Data is never markup on `runner serve`'s pages, checked in a real headless Chromium.

A model's reply, a card's text (and its drift), a gate's summary and shown values, a reviewer's
comment and revise input, and a run's item id each carry the corpus below. They are shown in the
element browser, the card view (with the drift table), the gate card, the gates history and the
run list; every one must read as the literal text, and none may run: no alert, no
``window.__pwned``, no element the payload would have created.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.surfaces.test_web_review import ReviewSite, shipped_site

from ..webdriving import needs_browser, shot, wait

pytestmark = needs_browser
webdriver = pytest.importorskip("selenium.webdriver")

from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

# What an attacker would put in data: each sets window.__pwned (or alerts) if it ever runs.
SCRIPT = "<script>window.__pwned='script';alert('script')</script>"
IMG = "<img src=x onerror=\"window.__pwned='img';alert('img')\">"
SVG = "<svg onload=\"window.__pwned='svg'\"></svg>"
LINK = "<a href=\"javascript:window.__pwned='link'\">open</a>"
JS_URL = "javascript:window.__pwned='url'"
CORPUS = [SCRIPT, IMG, SVG, LINK, JS_URL]
HOSTILE = " ".join(CORPUS)
# The fake model answers every prompt with the corpus (the report's check wants its sections).
REPLY = f"## Summary\n{SCRIPT}\n## Findings\n{IMG} {SVG}\n## Next steps\n{LINK}\n{JS_URL}\n"


def _toml_str(text: str) -> str:
    return json.dumps(text)  # a JSON string is a TOML basic string for this ASCII text


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> ReviewSite:
    return shipped_site(
        tmp_path_factory.mktemp("markup"),
        '[general]\ndefault_provider = "fake"\n\n[providers.fake]\n'
        f'script = [{{match = ".", reply = {_toml_str(REPLY)}}}]\n',
    )


def _edit_shots(site: ReviewSite, old: str, new: str) -> None:
    path = site.project.root / "examples" / "scene-detail" / "scenes.yaml"
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")


def assert_inert(driver: Any) -> None:
    """Nothing of the corpus ran or became an element."""
    try:
        alert = driver.switch_to.alert
        text = alert.text
        alert.dismiss()
        pytest.fail(f"an alert opened: {text!r}")
    except NoAlertPresentException:
        pass
    # read in one script: a page that reloads between two reads is never half-checked
    found = driver.execute_script(
        """return {
          pwned: window.__pwned === undefined ? null : String(window.__pwned),
          inline: [...document.querySelectorAll('script:not([src])')]
                    .filter(s => s.textContent.includes('__pwned')).length,
          created: document.querySelectorAll('main svg[onload], main img[onerror]').length,
          hrefs: [...document.querySelectorAll('a')].map(a => a.getAttribute('href') || ''),
        }"""
    )
    assert found["pwned"] is None, found["pwned"]
    assert found["inline"] == 0 and found["created"] == 0, found
    bad = [h for h in found["hrefs"] if h.strip().lower().startswith("javascript:")]
    assert not bad, bad


def shown(driver: Any, css: str) -> str:
    text: str = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent).join('\\n')",
        css,
    )
    return text


def test_a_model_reply_and_a_card_read_as_text(site: ReviewSite, served: Any, browser: Any) -> None:
    first = site.apply("scene-detail", item=IMG)
    assert first["exit_code"] == 0, first
    # the shot's text carries the corpus into the card, then a change makes it drift
    _edit_shots(site, "primary_subject: her hand}", f"primary_subject: {json.dumps(HOSTILE)}}}")
    doc = site.apply("scene-detail", item=IMG)
    assert doc["exit_code"] == 0, doc
    run_id = doc["run"]["id"]

    browser.get(f"{served.url}/runs/{run_id}")
    assert IMG in browser.find_element(By.CSS_SELECTOR, "dl.header").text  # the item id
    browser.find_element(By.CSS_SELECTOR, 'tr[data-step="detail"] button.browse').click()
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#browser details.element")) == 6)
    for box in browser.find_elements(By.CSS_SELECTOR, "#browser details.element"):
        if box.get_attribute("open") is None:
            box.find_element(By.TAG_NAME, "summary").click()
    replies = shown(browser, "#browser section.block pre")
    for payload in CORPUS:
        assert payload in replies, payload  # the model reply, as it came
    assert SCRIPT in browser.find_element(By.ID, "browser-body").text  # and visible
    assert_inert(browser)

    browser.find_element(By.CSS_SELECTOR, 'tr[data-step="card"] button.browse').click()
    title = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#browser .drift-title"))
    drifted = title[0].find_element(By.XPATH, "ancestor::details[1]")
    if drifted.get_attribute("open") is None:
        drifted.find_element(By.TAG_NAME, "summary").click()
    new = shown(browser, "#browser table.drift td.new")
    card = shown(browser, "#browser .card-view pre")
    for payload in CORPUS:
        assert payload in new and payload in card, payload
    assert "her hand" in shown(browser, "#browser table.drift td.old")
    assert SCRIPT in drifted.text
    assert_inert(browser)
    browser.execute_script("arguments[0].scrollIntoView()", drifted)
    shot(browser, "markup-card")


def test_a_gate_and_its_history_read_as_text(site: ReviewSite, served: Any, browser: Any) -> None:
    doc = site.apply("report", f"title={HOSTILE}")
    assert doc["exit_code"] == 7, doc
    run_id = doc["run"]["id"]

    browser.get(f"{served.url}/")
    row = browser.find_element(By.CSS_SELECTOR, f'#runs tr[data-run="{run_id}"]')
    assert SCRIPT in row.text  # the item id in the run list
    assert_inert(browser)

    browser.get(f"{served.url}/runs/{run_id}")
    card = browser.find_element(By.ID, "gate-review")
    assert SCRIPT in card.find_element(By.CLASS_NAME, "summary").text
    show = shown(browser, "#gate-review dl.show pre")
    for payload in CORPUS:
        assert payload in show, payload  # the title and the model's draft
    assert_inert(browser)
    # a reviewer's comment and revise input are data too
    card.find_element(By.CLASS_NAME, "gate-input").send_keys(f"feedback={IMG}")
    card.find_element(By.CLASS_NAME, "gate-comment").send_keys(SCRIPT)
    card.find_element(By.CLASS_NAME, "gate-by").send_keys(SVG)
    card.find_element(By.CSS_SELECTOR, "button.revise").click()
    decided = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#gate-review .decided"))
    assert SVG in decided[0].text
    assert_inert(browser)
    wait(browser, lambda d: d.find_element(By.ID, "run-status").text == "waiting for review", 30)
    wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, "#gate-review .decided"), 30)
    browser.get(f"{served.url}/runs/{run_id}")
    first = browser.find_elements(By.CSS_SELECTOR, "#rounds tbody tr")[0]
    cells = [c.text for c in first.find_elements(By.TAG_NAME, "td")]
    assert cells[3] == SVG and cells[5] == SCRIPT and IMG in cells[6], cells
    assert_inert(browser)
    shot(browser, "markup-gate")


def test_the_corpus_is_what_the_journal_holds(site: ReviewSite) -> None:
    # the page showed the data as stored, not a cleaned copy of it
    runs = json.loads(site.cli("runs", "list", "--json").stdout)["runs"]
    assert {IMG, HOSTILE} <= {r["item"] for r in runs}
