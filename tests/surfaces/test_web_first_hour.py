"""The run page as a newcomer meets it (issue 30), in headless Chromium: the graph's arrows and
for_each marker, values shown as text (markdown rendered safely), images and folded JSON, an
iterate form that opens alone and starts from the run's vars, and an awaiting run that does not
say it finished. Screenshots go to $RUNNER_SCREENS (default tests/web_screens/).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.surfaces.test_web_review import ReviewSite, shipped_site
from tests.webdriving import needs_browser, shot, wait

pytestmark = needs_browser
webdriver = pytest.importorskip("selenium.webdriver")

from selenium.webdriver.common.by import By  # noqa: E402

NOTES = """\
runner: 1
name: notes
root: ..
phases: [write, review]
steps:
  words:
    uses: template
    phase: write
    for_each: ["one", "two"]
    with:
      vars: {}
      text: |
        ## Heading ${{ item }}

        Some *quiet* words and `code`.
        - point **bold** <script>window.pwned = 1</script>
        - <img src=x onerror="window.pwned = 2">

        ```
        <b>not bold</b>
        ```
  review:
    uses: human_gate
    phase: review
    needs: [words]
    with:
      summary: "Keep these notes?"
      show: {notes: "${{ steps.words.output[0].text }}"}
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> ReviewSite:
    site = shipped_site(
        tmp_path_factory.mktemp("first-hour"), '[general]\ndefault_provider = "fake"\n'
    )
    site.project.write("pipelines/notes.yaml", NOTES)
    return site


def _open(browser: Any, url: str) -> None:
    browser.get(url)
    wait(browser, lambda d: d.find_elements(By.ID, "run-page"))


def test_an_awaiting_run_says_it_waits_and_its_graph_reads(
    site: ReviewSite, served: Any, browser: Any
) -> None:
    doc = site.apply("notes")
    assert doc["exit_code"] == 7, doc
    _open(browser, f"{served.url}/runs/{doc['run']['id']}")
    header = browser.find_element(By.CSS_SELECTOR, "dl.header").text
    assert "waiting for a decision since" in header and "finished" not in header, header
    # the gate's text to review reads as markdown, its tags as text
    notes = browser.find_element(By.CSS_SELECTOR, "#gate-review dl.show .md")
    assert notes.find_element(By.CSS_SELECTOR, ".md-h").text == "Heading one"
    assert "<script>window.pwned = 1</script>" in notes.text
    assert not browser.find_elements(By.CSS_SELECTOR, "#gate-review script, #gate-review b")
    assert browser.execute_script("return window.pwned === undefined")
    summaries = [
        s.text for s in browser.find_elements(By.CSS_SELECTOR, "details.phase-group > summary")
    ]
    assert summaries == ["WRITE 1 step", "REVIEW 1 step"], summaries
    browser.find_element(By.CSS_SELECTOR, "#graph-box > summary").click()
    svg = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#graph svg.edges"))[0]
    edges = svg.find_elements(By.CSS_SELECTOR, "path.edge")
    assert len(edges) == 1 and edges[0].get_attribute("marker-end") == "url(#arrow)"
    assert svg.find_elements(By.CSS_SELECTOR, "marker#arrow path.arrowhead")
    assert browser.find_element(By.CSS_SELECTOR, "#graph .edge-count").text == "1 edge"
    # the edges are drawn above the boxes
    z = browser.execute_script(
        "return [getComputedStyle(arguments[0]).zIndex,"
        " getComputedStyle(document.querySelector('#graph .node')).zIndex]",
        svg,
    )
    assert int(z[0]) > int(z[1]), z
    badge = browser.find_element(By.CSS_SELECTOR, "#node-words .fe-badge")
    assert badge.text.startswith("for each: ") and "once per element" in badge.get_attribute(
        "title"
    )
    assert not browser.find_elements(By.CSS_SELECTOR, "#node-review .fe-badge")
    legend = browser.find_element(By.CSS_SELECTOR, ".graph-legend").text
    assert "for each marks a step run once per element" in legend
    assert "×" not in browser.find_element(By.ID, "graph").text
    browser.execute_script("document.getElementById('graph-box').scrollIntoView()")
    shot(browser, "first-hour-graph")


def test_elements_show_text_as_text_and_never_as_html(
    site: ReviewSite, served: Any, browser: Any
) -> None:
    doc = site.apply("notes", item="second")
    _open(browser, f"{served.url}/runs/{doc['run']['id']}")
    browser.find_element(By.CSS_SELECTOR, 'tr[data-step="words"] button.browse').click()
    first = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#browser details.element"))[0]
    if first.get_attribute("open") is None:
        first.find_element(By.TAG_NAME, "summary").click()
    out = first.find_elements(By.CSS_SELECTOR, "section.readable")[-1]
    md = out.find_element(By.CSS_SELECTOR, ".md")
    assert md.find_element(By.CSS_SELECTOR, ".md-h").text == "Heading one"
    assert md.find_element(By.CSS_SELECTOR, "li strong").text == "bold"
    assert md.find_element(By.CSS_SELECTOR, "p em").text == "quiet"
    assert md.find_element(By.CSS_SELECTOR, "pre.md-code").text == "<b>not bold</b>"
    items = [li.text for li in md.find_elements(By.TAG_NAME, "li")]
    assert items[0] == "point bold <script>window.pwned = 1</script>", items
    assert items[1] == '<img src=x onerror="window.pwned = 2">'
    # the tags in the text stayed text: nothing ran, no element was made of them
    assert not browser.find_elements(By.CSS_SELECTOR, "#browser script, #browser b")
    assert not browser.find_elements(By.CSS_SELECTOR, "#browser img:not(.picture)")
    assert browser.execute_script("return window.pwned === undefined")
    # the other fields of the output are folded JSON, a click away
    folds = out.find_elements(By.CSS_SELECTOR, "details.fold")
    assert all(f.get_attribute("open") is None for f in folds)
    shot(browser, "first-hour-markdown")


def test_image_outputs_show_their_images(site: ReviewSite, served: Any, browser: Any) -> None:
    doc = site.apply("thumbnail", "video_id=pics", "n=2")
    assert doc["exit_code"] == 0, doc
    _open(browser, f"{served.url}/runs/{doc['run']['id']}")
    browser.find_element(By.CSS_SELECTOR, 'tr[data-step="generate"] button.browse').click()
    pics = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#browser img.picture"))
    assert len(pics) == 2
    wait(
        browser,
        lambda d: all(d.execute_script("return arguments[0].naturalWidth", p) for p in pics),
    )
    browser.execute_script("document.getElementById('browser').scrollIntoView()")
    shot(browser, "first-hour-images")


def test_iterate_form_opens_alone_and_starts_from_the_runs_vars(
    site: ReviewSite, served: Any, browser: Any
) -> None:
    doc = site.apply("thumbnail", "video_id=form", "n=4", "vars={subject: a red fox, style: noir}")
    assert doc["exit_code"] == 0, doc
    _open(browser, f"{served.url}/runs/{doc['run']['id']}")
    header = browser.find_element(By.CSS_SELECTOR, "dl.header").text
    assert "finished" in header and "waiting" not in header  # a completed run did finish
    tiles = browser.find_elements(By.CSS_SELECTOR, "#grid .tile")
    heights = [t.size["height"] for t in tiles]
    tiles[0].find_element(By.CSS_SELECTOR, "details.iterate > summary").click()
    box = tiles[0].find_element(By.CLASS_NAME, "iterate-vars")
    assert sorted(box.get_attribute("value").splitlines()) == ["style=noir", "subject=a red fox"]
    after = [t.size["height"] for t in tiles]
    assert after[0] > heights[0]  # the opened tile grew ...
    assert after[1:] == heights[1:], (heights, after)  # ... its row's others did not
    shot(browser, "first-hour-iterate-form")


def test_screenshots_were_saved() -> None:
    from tests.webdriving import SCREENS

    for name in ("graph", "markdown", "images", "iterate-form"):
        assert Path(SCREENS / f"first-hour-{name}.png").stat().st_size > 5000


def test_folded_json_opens_on_a_click(site: ReviewSite, served: Any, browser: Any) -> None:
    doc = site.apply("thumbnail", "video_id=fold", "n=1")
    _open(browser, f"{served.url}/runs/{doc['run']['id']}")
    browser.find_element(By.CSS_SELECTOR, 'tr[data-step="generate"] button.browse').click()
    out = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#browser section.readable"))[-1]
    fold = out.find_element(By.CSS_SELECTOR, "details.fold")  # an iteration's metadata
    assert fold.find_element(By.TAG_NAME, "summary").text.endswith("fields}")
    assert not fold.find_elements(By.CSS_SELECTOR, "dl.fields")  # not built while folded
    fold.find_element(By.TAG_NAME, "summary").click()
    inner = wait(browser, lambda d: fold.find_elements(By.CSS_SELECTOR, "dl.fields"))[0]
    assert "model" in inner.text
