"""The review surface of `runner serve` in headless Chromium: tiles arriving live during a slow
generation, element browsing on scene-detail, the card drift view after a shot's input is edited,
a gate's history over three rounds, and picking with the keyboard.

Screenshots of each page go to $RUNNER_SCREENS (default tests/web_screens/, gitignored). The
server and the browser are tests/conftest.py's ``served`` and ``browser`` fixtures.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, Project
from tests.surfaces.test_web_api import Site
from tests.webdriving import needs_browser, shot, start_iterate, wait

pytestmark = needs_browser
webdriver = pytest.importorskip("selenium.webdriver")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

DELAY_MS = 700  # each fake image takes this long: tiles arrive one by one (concurrency 1)


class ReviewSite(Site):
    """A shipped project (thumbnail, report, scene-detail) with a slow fake provider."""

    def apply(self, pipeline: str, *params: str, item: str | None = None) -> dict[str, Any]:
        args = [a for p in params for a in ("-p", p)] + (["--item", item] if item else [])
        res = self.cli("apply", f"pipelines/{pipeline}.yaml", "--json", "-q", *args)
        doc: dict[str, Any] = json.loads(res.stdout)
        return doc


def shipped_site(root: Path, toml: str) -> ReviewSite:
    """The shipped pipelines, prompts, examples, cards and schemas in ``root``, with ``toml``
    as its runner.toml."""
    for folder in ("pipelines", "prompts", "examples", "cards", "schemas"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns(".runner"))
    (root / "runner.toml").write_text(toml, encoding="utf-8")
    return ReviewSite(Project(root), root / ".runner", "", "", "")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> ReviewSite:
    return shipped_site(
        tmp_path_factory.mktemp("review"),
        f'[general]\ndefault_provider = "fake"\n\n[providers.fake]\ndelay_ms = {DELAY_MS}\n',
    )


def run_doc(site: ReviewSite, run_id: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(site.cli("runs", "show", run_id, "--json").stdout)
    return doc


def test_tiles_arrive_live_during_a_slow_generation(
    site: ReviewSite, served: Any, browser: Any
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "apply", "pipelines/thumbnail.yaml", "-q", "--json",
         "--state", str(site.state), "-p", "video_id=live1", "-p", "n=4", "-p", "concurrency=1"],
        cwd=site.project.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        run_id = ""
        while not run_id:
            assert time.monotonic() < deadline, "the run never started"
            listed = json.loads(site.cli("runs", "list", "--json").stdout)
            runs = listed.get("runs", [])  # an error until the state directory exists
            run_id = next((r["id"] for r in runs if r["item"] == "live1"), "")
            time.sleep(0.05)
        browser.get(f"{served.url}/runs/{run_id}")
        # the first tiles are on the page while the run still runs, with the count
        first = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#live-grid .tile"), 30)
        progress = browser.find_element(By.ID, "tile-progress").text
        assert progress.endswith("of 4 generated") and not progress.startswith("4 of"), progress
        assert run_doc(site, run_id)["run"]["status"] == "running"
        assert first[0].get_attribute("data-ordinal") == "1"
        wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#live-grid .tile")) >= 2, 30)
        shot(browser, "live-tiles")
        # when the run ends the page reloads with the four finished, pickable tiles
        wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#grid .tile")) == 4, 60)
        assert browser.find_element(By.ID, "run-status").text == "completed"
        assert "4 of 4 completed" in browser.find_element(By.ID, "tile-progress").text
    finally:
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err


def test_keyboard_moves_between_tiles_and_picks(
    site: ReviewSite, served: Any, browser: Any
) -> None:
    runs = json.loads(site.cli("runs", "list", "--json").stdout)["runs"]
    run_id = next(r["id"] for r in runs if r["item"] == "live1")
    browser.get(f"{served.url}/runs/{run_id}")
    body = browser.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.ARROW_RIGHT)  # focus enters the grid on the first tile
    assert browser.switch_to.active_element.get_attribute("id") == "tile-1"
    body = browser.switch_to.active_element
    body.send_keys(Keys.ARROW_RIGHT)
    body = browser.switch_to.active_element
    assert body.get_attribute("id") == "tile-2"
    body.send_keys("3")  # a number key picks that tile
    wait(browser, lambda d: "picked" in d.find_element(By.ID, "tile-3").get_attribute("class"))
    assert [it["ordinal"] for it in run_doc(site, run_id)["iterations"] if it["picked"]] == [3]
    browser.switch_to.active_element.send_keys(Keys.ENTER)  # full size
    box = wait(
        browser,
        lambda d: (
            d.find_element(By.ID, "lightbox").is_displayed() and d.find_element(By.ID, "lightbox")
        ),
    )
    assert box.find_element(By.TAG_NAME, "img").get_attribute("naturalWidth") == "1280"
    shot(browser, "keyboard-full-size")
    browser.switch_to.active_element.send_keys(Keys.ESCAPE)
    wait(browser, lambda d: not d.find_element(By.ID, "lightbox").is_displayed())
    shot(browser, "keyboard-picked")


def _shots(site: ReviewSite) -> Path:
    return site.project.root / "examples" / "scene-detail" / "scenes.yaml"


def test_element_browsing_on_scene_detail(site: ReviewSite, served: Any, browser: Any) -> None:
    doc = site.apply("scene-detail")
    assert doc["exit_code"] == 0, doc
    run_id = doc["run"]["id"]
    browser.get(f"{served.url}/runs/{run_id}")
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-step="detail"]')
    assert "6 of 6 elements" in row.text
    row.find_element(By.CSS_SELECTOR, "button.browse").click()
    elements = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#browser details.element"))
    assert len(elements) == 6 and "6 elements" in browser.find_element(By.ID, "browser-count").text
    first = elements[0]
    titles = [h.text for h in first.find_elements(By.CSS_SELECTOR, "section.block h4")]
    assert titles[:4] == ["INPUT", "SYSTEM PROMPT", "RENDERED PROMPT", "MODEL REPLY"], titles
    blocks = {b.find_element(By.TAG_NAME, "h4").text: b for b in first.find_elements(By.CSS_SELECTOR, "section.block")}
    prompt = blocks["RENDERED PROMPT"].find_element(By.TAG_NAME, "pre").text
    assert prompt.startswith("[RenderPromptCard v1]")
    assert "attempt 1: passed" in first.find_element(By.CSS_SELECTOR, ".verdicts").text
    # another element opens on click
    elements[3].find_element(By.TAG_NAME, "summary").click()
    wait(browser, lambda d: elements[3].get_attribute("open") is not None)
    shot(browser, "elements-scene-detail")
    # the card step: card, hash, prompt block
    browser.find_element(By.CSS_SELECTOR, 'tr[data-step="card"] button.browse').click()
    wait(browser, lambda d: d.find_element(By.ID, "browser-step").text == "card")
    card = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#browser .card-view"))[0]
    assert len(card.find_element(By.CLASS_NAME, "card-hash").text) == 16
    assert "[RenderPromptCard v1]" in card.text


def test_drift_view_after_editing_a_shots_input(
    site: ReviewSite, served: Any, browser: Any
) -> None:
    data = _shots(site)
    text = data.read_text(encoding="utf-8")
    old = "extreme close-up of her hand on the rug"
    assert old in text
    data.write_text(text.replace(old, "extreme close-up of her hand on the wet rug"), "utf-8")
    doc = site.apply("scene-detail")
    assert doc["exit_code"] == 0, doc
    browser.get(f"{served.url}/runs/{doc['run']['id']}")
    browser.find_element(By.CSS_SELECTOR, 'tr[data-step="card"] button.browse').click()
    title = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#browser .drift-title"))
    assert len(title) == 1  # one shot changed
    drifted = title[0].find_element(By.XPATH, "ancestor::details[1]")
    if drifted.get_attribute("open") is None:
        drifted.find_element(By.TAG_NAME, "summary").click()
    assert "drifted since the previous run" in title[0].text.lower()
    rows = drifted.find_elements(By.CSS_SELECTOR, "table.drift tr")[1:]
    fields = {r.find_element(By.CLASS_NAME, "field").text: r for r in rows}
    assert "render_strategy.camera_direction" in fields, list(fields)
    row = fields["render_strategy.camera_direction"]
    assert "on the rug" in row.find_element(By.CLASS_NAME, "old").text
    assert "on the wet rug" in row.find_element(By.CLASS_NAME, "new").text
    browser.execute_script("arguments[0].scrollIntoView()", drifted)
    shot(browser, "card-drift")
    # the unchanged shots say so
    assert browser.find_elements(By.XPATH, "//p[text()='unchanged since the previous run']")


WAITING = "waiting for review"


def test_gate_history_over_three_rounds(site: ReviewSite, served: Any, browser: Any) -> None:
    doc = site.apply("report", "title=Browser review")
    run_id = doc["run"]["id"]
    assert doc["exit_code"] == 7
    for by, comment, text in (("ana", "too long", "feedback=shorter"), ("bo", "", "tone=plain")):
        browser.get(f"{served.url}/runs/{run_id}")
        card = browser.find_element(By.ID, "gate-review")
        card.find_element(By.CLASS_NAME, "gate-input").send_keys(text)
        card.find_element(By.CLASS_NAME, "gate-comment").send_keys(comment)
        card.find_element(By.CLASS_NAME, "gate-by").send_keys(by)
        card.find_element(By.CSS_SELECTOR, "button.revise").click()
        decided = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#gate-review .decided"))
        assert "runs again with your input" in decided[0].text and "asks again" in decided[0].text
        # the run goes on by itself; the page follows and reloads at the next round
        # the header says awaiting_human in words (issue 42)
        wait(browser, lambda d: d.find_element(By.ID, "run-status").text == WAITING, 30)
        wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, "#gate-review .decided"), 30)
    browser.get(f"{served.url}/runs/{run_id}")
    body = browser.find_element(By.TAG_NAME, "body")
    body.send_keys("r")  # reject from the keyboard, after a confirmation
    alert = wait(browser, lambda d: d.switch_to.alert)
    assert "Reject gate 'review'?" in alert.text
    alert.accept()
    decided = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#gate-review .decided"))
    assert "ends rejected" in decided[0].text and "publish" in decided[0].text
    wait(browser, lambda d: d.find_element(By.ID, "run-status").text == "rejected", 30)
    wait(browser, lambda d: not d.find_elements(By.ID, "gate-review"), 30)
    rows = browser.find_elements(By.CSS_SELECTOR, "#rounds tbody tr")
    cells = [[c.text for c in r.find_elements(By.TAG_NAME, "td")] for r in rows]
    assert [(c[1], c[2], c[3]) for c in cells] == [
        ("1", "revise", "ana"),
        ("2", "revise", "bo"),
        ("3", "reject", os.environ.get("USER") or cells[2][3]),
    ]
    assert cells[0][5] == "too long" and cells[0][6] == "feedback: shorter"
    assert cells[1][6] == "tone: plain"
    # the step past the rejected gate reads "not run", not pending
    publish = browser.find_element(By.CSS_SELECTOR, 'tr[data-step="publish"] .st').text
    assert publish == "not run"
    shot(browser, "gate-history")
    # the DAG, drawn from the same graph `runner graph` prints
    browser.find_element(By.CSS_SELECTOR, "#graph-box > summary").click()
    node = wait(browser, lambda d: d.find_elements(By.ID, "node-publish"))[0]
    assert "not run" in node.text and "status-not" in node.get_attribute("class")
    assert "rejected" in browser.find_element(By.ID, "node-review").text
    assert browser.find_elements(By.CSS_SELECTOR, "#graph svg.edges path")
    graph = site.project.cli("graph", "pipelines/report.yaml", "--format", "text").stdout
    for sid in ("gather", "prompt", "draft", "review", "publish"):
        assert sid in graph and browser.find_elements(By.ID, f"node-{sid}")
    browser.execute_script("window.scrollTo(0, document.body.scrollHeight)")
    shot(browser, "graph")


def test_run_list_follows_runs_and_the_tab_follows_the_page(
    site: ReviewSite, served: Any, browser: Any
) -> None:
    browser.get(f"{served.url}/")
    assert browser.find_element(By.CSS_SELECTOR, "nav a.here").text == "Runs"
    before = len(browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr[data-run]"))
    doc = site.apply("report", "title=Appears by itself")
    wait(
        browser,
        lambda d: d.find_elements(By.CSS_SELECTOR, f'#runs tr[data-run="{doc["run"]["id"]}"]'),
        15,
    )
    assert len(browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr[data-run]")) == before + 1
    shot(browser, "runs-live")
    browser.get(f"{served.url}/?awaiting=1")
    assert browser.find_element(By.CSS_SELECTOR, "nav a.here").text == "Awaiting review"
    browser.get(f"{served.url}/runs/{doc['run']['id']}")
    assert browser.find_element(By.CSS_SELECTOR, "nav a.here").text == "Runs"
    shot(browser, "gate-pending")


MANY = 520  # more than one request may ask for (500)


def test_element_browser_pages_a_large_for_each(
    site: ReviewSite, served: Any, browser: Any
) -> None:
    site.project.write(
        "pipelines/many.yaml",
        f"""\
        runner: 1
        name: many
        root: ..
        steps:
          each:
            uses: template
            for_each: {list(range(MANY))}
            with: {{text: "element ${{{{ item }}}} of {MANY}"}}
        """,
    )
    doc = site.apply("many")
    assert doc["exit_code"] == 0, doc
    browser.get(f"{served.url}/runs/{doc['run']['id']}")
    browser.find_element(By.CSS_SELECTOR, 'tr[data-step="each"] button.browse').click()
    count = browser.find_element(By.ID, "browser-count")
    wait(browser, lambda d: count.text == f"{MANY} elements, 100 shown")
    boxes = "#browser details.element"
    assert len(browser.find_elements(By.CSS_SELECTOR, boxes)) == 100
    # scrolling to the end of the list loads the next page, up to the last element
    for shown in (200, 300, 400, 500, MANY):
        more = browser.find_element(By.ID, "more-elements")
        browser.execute_script("arguments[0].scrollIntoView()", more)
        wait(browser, lambda d, n=shown: len(d.find_elements(By.CSS_SELECTOR, boxes)) == n)
    assert count.text == f"{MANY} elements"
    assert not browser.find_elements(By.ID, "more-elements")
    last = browser.find_elements(By.CSS_SELECTOR, boxes)[-1]
    assert last.get_attribute("data-element") == str(MANY - 1)
    last.find_element(By.TAG_NAME, "summary").click()
    assert f"element {MANY - 1} of {MANY}" in last.text
    numbers = [
        e.get_attribute("data-element") for e in browser.find_elements(By.CSS_SELECTOR, boxes)
    ]
    assert numbers == [str(i) for i in range(MANY)]
    # the server sent pages, not everything at once
    asked = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
        ".filter(n => n.includes('/steps/each/elements'))"
    )
    assert sorted(int(u.split("offset=")[1].split("&")[0]) for u in asked) == [
        0, 100, 200, 300, 400, 500
    ]  # fmt: skip
    assert all(u.endswith("limit=100") for u in asked)
    shot(browser, "elements-paged")


def test_a_graph_of_many_edges_is_drawn_whole(site: ReviewSite, served: Any, browser: Any) -> None:
    sources, sinks = 30, 25  # every sink needs every source: 750 edges
    lines = ["runner: 1", "name: dense", "root: ..", "phases: [make, join]", "steps:"]
    for i in range(sources):
        lines += [f"  a{i}:", "    uses: template", "    phase: make", f"    with: {{text: a{i}}}"]
    for j in range(sinks):
        needs = ", ".join(f"a{i}" for i in range(sources))
        lines += [f"  b{j}:", "    uses: template", "    phase: join", f"    needs: [{needs}]"]
        lines += [f"    with: {{text: b{j}}}"]
    site.project.write("pipelines/dense.yaml", "\n".join(lines) + "\n")
    doc = site.apply("dense")
    assert doc["exit_code"] == 0, doc
    graph = json.loads(site.project.cli("graph", "pipelines/dense.yaml", "--json").stdout)
    want = {tuple(e) for e in graph["edges"]}
    assert len(want) == sources * sinks
    browser.get(f"{served.url}/runs/{doc['run']['id']}")
    browser.find_element(By.CSS_SELECTOR, "#graph-box > summary").click()
    svg = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#graph svg.edges"))[0]
    assert svg.get_attribute("data-edges") == str(len(want))
    curves = browser.execute_script(
        "return [...arguments[0].querySelectorAll('path.edge')].map(p => p.getAttribute('d')).join(' ')",
        svg,
    )
    assert curves.count("M") == len(want)
    assert f"{len(want)} edges (drawn as one layer)" in browser.find_element(By.ID, "graph").text
    assert len(browser.find_elements(By.CSS_SELECTOR, "#graph .node")) == sources + sinks
    shot(browser, "graph-dense")


def test_iterate_form_takes_vars_and_the_child_says_which_it_used(
    site: ReviewSite, served: Any, browser: Any
) -> None:
    doc = site.apply("thumbnail", "video_id=vars1", "n=2", "vars={subject: a red fox, style: noir}")
    assert doc["exit_code"] == 0, doc
    parent = doc["run"]["id"]
    browser.get(f"{served.url}/runs/{parent}")
    child = start_iterate(browser, 2, n=1, template_vars="style=pastel")
    assert wait(browser, lambda d: d.find_elements(By.ID, "iterate-note"))  # while it runs
    wait(browser, lambda d: run_doc(site, child)["run"]["status"] == "completed", 30)
    browser.get(f"{served.url}/runs/{child}")
    note = browser.find_element(By.ID, "iterate-note")
    # what `runner iterate` prints, on the child's page
    second = run_doc(site, parent)["iterations"][1]["id"]  # the tile the form was on
    res = site.cli("iterate", second, "--n", "1", "--var", "style=pastel", "-q")
    assert res.exit_code == 0, res.stderr
    cli = res.stdout.splitlines()
    assert cli[1] == 'vars used (only --var): style="pastel"'
    assert note.find_element(By.CLASS_NAME, "vars-used").text.startswith('style="pastel"')
    assert cli[2].startswith('parent vars not used: subject="a red fox"')
    assert note.find_element(By.CLASS_NAME, "vars-left").text.startswith('subject="a red fox"')
    # the whole prompt as sent (issue 30: the first line alone hid --var and --prompt-append)
    assert cli[3] == "prompt (as sent, with the reference image):"
    sent = note.find_element(By.CLASS_NAME, "prompt-sent").text.splitlines()
    assert [x.strip() for x in cli[4 : 4 + len(sent)]] == [x.strip() for x in sent]
    assert "Style: pastel." in sent
    assert parent in note.text
    shown = run_doc(site, child)["run"]
    assert shown["params"]["vars"] == {"style": "pastel"} and shown["parent_run_id"] == parent
    shot(browser, "iterate-vars")
