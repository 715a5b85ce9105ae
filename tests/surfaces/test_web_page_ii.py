"""The run page as a reviewer lives in it (issue 42, section 1), in a real headless Chromium.

Params, timelines, elements named by value and found by a search, a run of a pipeline with a
required param, a gate's pictures whole, an output read at full width, the page never framed
by another site. One server and one browser for the module (tests/conftest.py's ``served`` and
``browser``); screenshots go to $RUNNER_SCREENS (default tests/web_screens/).
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.surfaces.test_web_api import Site, build_site
from tests.webdriving import free_port, needs_browser, shot, wait

pytestmark = needs_browser
webdriver = pytest.importorskip("selenium.webdriver")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.expected_conditions import staleness_of  # noqa: E402

CITIES = """\
    runner: 1
    name: cities
    params:
      cities: {type: array, items: {type: string}}
    steps:
      describe:
        uses: llm
        for_each: "${{ params.cities }}"
        with: {prompt: "Describe ${{ item }} in one line."}
        check: ["${{ output.text | length > 0 }}"]
      join:
        uses: template
        with:
          text: "{% for r in lines %}{{ r.text }}\\n{% endfor %}"
          vars: {lines: "${{ steps.describe.output }}"}
"""

PEOPLE = """\
    runner: 1
    name: people
    params:
      people: {type: array, default: [{name: Ada, born: 1815}, {name: Alan, born: 1912}]}
    steps:
      greet:
        uses: shell
        for_each: "${{ params.people }}"
        label: "${{ item.name }}"
        with: {run: "echo hello ${{ item.name }}"}
"""

POSTER = """\
    runner: 1
    name: poster
    steps:
      art:
        uses: image
        with: {prompt: "a poster of a lighthouse", n: 2, size: 512x512}
      review:
        uses: human_gate
        with:
          summary: "Use these posters?"
          show: {posters: "${{ steps.art.output.iterations | map(attribute='raw') | list }}"}
"""


HOSTILE = """\
    runner: 1
    name: hostile
    params:
      note: {type: string, default: "<img src=x onerror=window.__pwned=1>"}
      bits: {type: array, default: ["<script>window.__pwned=2</script>", "<b onclick=x>b</b>"]}
    steps:
      each:
        uses: template
        for_each: "${{ params.bits }}"
        label: "${{ item }}"
        with: {text: "x"}
"""


INGEST = """\
    runner: 1
    name: ingest
    steps:
      files:
        uses: read
        with: {path: "notes/*.txt"}
      put:
        uses: ingest
        for_each: "${{ steps.files.output.files }}"
        label: "${{ item.path }}"
        with:
          collection: notes
          create: true
          documents: [{path: "${{ item.path }}", metadata: {kind: note}}]
        check: [{collection_has: {collection: notes, ids: "${{ output.ids }}"}}]
"""
NOTES = {
    "notes/acme-invoice.txt": "Invoice from ACME for 12 widgets, due in March.\n",
    "notes/minutes.txt": "Minutes of the board meeting: budget approved.\n",
    "notes/odd.txt": "A note <script>window.__pwned=3</script> about lighthouses.\n",
}


LAYERED = """\
    runner: 1
    name: layered
    phases: [one, two, three]
    steps:
      a: {uses: template, phase: one, with: {text: a}}
      b: {uses: template, phase: two, needs: [a], with: {text: b}}
      c: {uses: template, phase: three, needs: [a, b], with: {text: c}}
      each:
        uses: shell
        phase: two
        needs: [a]
        for_each: "${{ [1, 2, 3] }}"
        with: {run: "test ${{ item }} != 2"}
"""


@dataclass
class Runs:
    site: Site
    cities: str  # a for_each over a required param, by value
    people: str  # a for_each with a label: expression
    poster: str  # two 512x512 images waiting at a gate
    hostile: str  # params and labels that would be markup
    layered: str  # an edge that skips a phase, a for_each whose elements ended differently


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    site = build_site(tmp_path_factory.mktemp("page2"))
    proj = site.project
    for rel, text in NOTES.items():
        (proj.root / rel).parent.mkdir(exist_ok=True)
        (proj.root / rel).write_text(text)
    ids = {}
    for name, text, args in (
        ("cities", CITIES, ["-p", 'cities=["Paris", "Lagos", "Lima"]']),
        ("people", PEOPLE, []),
        ("poster", POSTER, []),
        ("hostile", HOSTILE, []),
        ("ingest", INGEST, []),
        ("layered", LAYERED, []),
    ):
        proj.write(f"{name}.yaml", text)
        res = proj.cli("apply", f"{name}.yaml", "--json", "-q", "--state", ".runner", *args)
        assert res.exit_code in (0, 6, 7), res.stderr  # 6: partial (layered), 7: at a gate
        ids[name] = res.json["run"]["id"]
    return Runs(site, ids["cities"], ids["people"], ids["poster"], ids["hostile"], ids["layered"])


@pytest.fixture(scope="module")
def site(runs: Runs) -> Site:
    return runs.site


def step_rows(browser: Any) -> dict[str, Any]:
    return {
        r.get_attribute("data-step"): r
        for r in browser.find_elements(By.CSS_SELECTOR, "table.steps tbody tr[data-step]")
    }


def test_run_page_shows_params_and_a_timeline(runs: Runs, served: Any, browser: Any) -> None:
    browser.get(f"{served.url}/runs/{runs.cities}")
    params = browser.find_element(By.ID, "run-params")
    row = params.find_element(By.CSS_SELECTOR, 'tr[data-param="cities"]')
    assert '"Paris", "Lagos", "Lima"' in row.text
    rows = step_rows(browser)
    assert set(rows) == {"describe", "join"}
    for row in rows.values():  # every step that ran has its bar, inside the column
        bar = row.find_element(By.CSS_SELECTOR, "td.timeline .bar")
        track = row.find_element(By.CSS_SELECTOR, "td.timeline .track")
        assert bar.size["width"] >= 2 and track.size["width"] > 50
        assert bar.location["x"] >= track.location["x"] - 1
        assert (
            bar.location["x"] + bar.size["width"] <= track.location["x"] + track.size["width"] + 1
        )
    # describe ran before join: its bar begins no later
    starts = {s: r.find_element(By.CSS_SELECTOR, ".bar").location["x"] for s, r in rows.items()}
    assert starts["describe"] <= starts["join"]
    shot(browser, "page2-params-timeline")


def test_a_required_param_is_read_from_the_run(runs: Runs, served: Any, browser: Any) -> None:
    # `cities` has no default: the page compiles the pipeline with the params the run recorded
    browser.get(f"{served.url}/runs/{runs.cities}")
    assert "is required" not in browser.find_element(By.TAG_NAME, "main").text
    rows = step_rows(browser)
    types = {s: r.find_elements(By.TAG_NAME, "td")[1].text for s, r in rows.items()}
    assert types == {"describe": "llm", "join": "template"}
    browser.find_element(By.CSS_SELECTOR, "#graph-box > summary").click()
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#graph .node")) == 2)
    shot(browser, "page2-required-param")


def element_names(browser: Any) -> list[str]:
    """'#INDEX LABEL' of each element on the panel (read in one script: the panel re-renders)."""
    names: list[str] = browser.execute_script(
        "return [...document.querySelectorAll('#browser-body details.element > summary')]"
        ".map((s) => s.querySelector('strong').textContent + ' ' +"
        " (s.querySelector('.el-label') || {textContent: ''}).textContent)"
    )
    return names


def test_elements_are_named_by_value_and_found(runs: Runs, served: Any, browser: Any) -> None:
    browser.get(f"{served.url}/runs/{runs.cities}")
    browser.find_element(By.CSS_SELECTOR, 'button.browse[data-step="describe"]').click()
    wait(browser, lambda d: len(element_names(d)) == 3)
    assert element_names(browser) == ["#0 Paris", "#1 Lagos", "#2 Lima"]
    first = browser.find_element(By.CSS_SELECTOR, "#browser-body details.element > summary")
    assert first.find_element(By.CSS_SELECTOR, ".el-track .bar").size["width"] >= 2
    assert first.find_element(By.CLASS_NAME, "el-duration").text.endswith("s")
    search = browser.find_element(By.ID, "browser-search")
    assert search.is_displayed()
    search.send_keys("lag")
    wait(browser, lambda d: element_names(d) == ["#1 Lagos"])
    assert "1 of 3 elements match" in browser.find_element(By.ID, "browser-count").text
    shot(browser, "page2-elements-search")
    search.clear()
    search.send_keys("#2")
    wait(browser, lambda d: element_names(d) == ["#2 Lima"])
    # a label: expression names elements whose item is not a short scalar
    browser.get(f"{served.url}/runs/{runs.people}")
    browser.find_element(By.CSS_SELECTOR, 'button.browse[data-step="greet"]').click()
    wait(browser, lambda d: element_names(d) == ["#0 Ada", "#1 Alan"])


def test_a_gates_pictures_are_shown_whole(runs: Runs, served: Any, browser: Any) -> None:
    browser.get(f"{served.url}/runs/{runs.poster}")
    card = browser.find_element(By.ID, "gate-review")
    pictures = card.find_elements(By.CSS_SELECTOR, "img.gate-image")
    assert len(pictures) == 2
    wait(
        browser,
        lambda d: all(d.execute_script("return arguments[0].complete", p) for p in pictures),
    )
    for picture in pictures:
        natural = browser.execute_script(
            "return [arguments[0].naturalWidth, arguments[0].naturalHeight]", picture
        )
        assert natural == [512, 512]
        shown = picture.size
        assert abs(shown["width"] - shown["height"]) <= 1 and shown["width"] >= 256
    # a tile shows a square poster whole too (contain, not cover)
    tile = browser.find_element(By.CSS_SELECTOR, "#grid .tile img")
    assert browser.execute_script("return getComputedStyle(arguments[0]).objectFit", tile) == (
        "contain"
    )
    shot(browser, "page2-gate-pictures")


def test_an_output_opens_wide(runs: Runs, served: Any, browser: Any) -> None:
    browser.get(f"{served.url}/runs/{runs.site.hero}")
    box = browser.find_element(By.CSS_SELECTOR, 'details.lazy-out[data-step="prompt"]')
    box.find_element(By.TAG_NAME, "summary").click()
    out = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#out-prompt pre"))[0]
    wait(browser, lambda d: "A striking" in out.text)
    table = browser.find_element(By.CSS_SELECTOR, "table.steps")
    assert out.size["width"] > table.size["width"] * 0.8
    shot(browser, "page2-output-wide")
    box.find_element(By.TAG_NAME, "summary").click()  # closed again: its row goes
    wait(browser, lambda d: not out.is_displayed())


@pytest.fixture
def framer(served: Any) -> Iterator[str]:
    """A page on another localhost port that frames the review page."""
    page = f'<!doctype html><iframe id="f" src="{served.url}/" width="800" height="600"></iframe>'

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"  # same site: the cookie goes
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_the_page_is_never_framed(served: Any, browser: Any, framer: str) -> None:
    browser.get(framer)
    frame = wait(browser, lambda d: d.find_elements(By.ID, "f"))[0]
    browser.switch_to.frame(frame)
    try:
        assert not browser.find_elements(By.ID, "runs")  # refused: the browser shows nothing
    finally:
        browser.switch_to.default_content()


def test_the_page_has_a_favicon(served: Any, browser: Any) -> None:
    browser.get(f"{served.url}/")
    link = browser.find_element(By.CSS_SELECTOR, 'link[rel="icon"]')
    href = link.get_attribute("href")
    browser.get(href)
    assert "<svg" in browser.page_source


def test_params_and_labels_read_as_text(runs: Runs, served: Any, browser: Any) -> None:
    browser.get(f"{served.url}/runs/{runs.hostile}")
    note = browser.find_element(By.CSS_SELECTOR, 'tr[data-param="note"]')
    assert note.text.endswith("<img src=x onerror=window.__pwned=1>")
    browser.find_element(By.CSS_SELECTOR, 'button.browse[data-step="each"]').click()
    wait(browser, lambda d: len(element_names(d)) == 2)
    assert element_names(browser) == [
        "#0 <script>window.__pwned=2</script>",
        "#1 <b onclick=x>b</b>",
    ]
    browser.find_element(By.ID, "browser-search").send_keys("<b")
    wait(browser, lambda d: element_names(d) == ["#1 <b onclick=x>b</b>"])
    assert browser.execute_script("return window.__pwned") is None
    assert not browser.find_elements(By.CSS_SELECTOR, "main img[src='x'], #browser-body b")


def test_the_run_list_groups_counts_times_and_previews(
    runs: Runs, served: Any, browser: Any
) -> None:
    browser.get(f"{served.url}/")
    groups = browser.find_elements(By.CSS_SELECTOR, "#runs tbody.run-group")
    names = [g.get_attribute("data-pipeline") for g in groups]
    assert sorted(names) == sorted(set(names))  # one group per pipeline
    assert {"thumbnail", "gated", "cities", "poster"} <= set(names)
    gated = browser.find_element(By.CSS_SELECTOR, 'tbody.run-group[data-pipeline="gated"]')
    assert "2 runs" in gated.find_element(By.CSS_SELECTOR, "tr.group-head").text
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-run="{runs.site.gated2}"]')
    assert row.find_element(By.CSS_SELECTOR, ".status").text == "waiting for review"
    assert "1 of 3" in row.find_element(By.CLASS_NAME, "step-counts").text
    assert "1 waiting" in row.find_element(By.CLASS_NAME, "step-counts").text
    cities = browser.find_element(By.CSS_SELECTOR, f'tr[data-run="{runs.cities}"]')
    assert cities.find_element(By.CLASS_NAME, "step-counts").text == "2 of 2"
    assert cities.find_element(By.CLASS_NAME, "took").text.endswith("s")
    hero = browser.find_element(By.CSS_SELECTOR, f'tr[data-run="{runs.site.hero}"]')
    preview = hero.find_element(By.CSS_SELECTOR, "td.preview img")
    wait(browser, lambda d: d.execute_script("return arguments[0].naturalWidth", preview) > 0)
    assert not cities.find_elements(By.CSS_SELECTOR, "td.preview img")  # no images, no preview
    shot(browser, "page2-run-list")


def test_collections_are_listed_and_searched(runs: Runs, served: Any, browser: Any) -> None:
    browser.get(f"{served.url}/")
    browser.find_element(By.LINK_TEXT, "Collections").click()
    row = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-collection="notes"]'))
    assert row[0].find_elements(By.TAG_NAME, "td")[1].text == "3"
    assert browser.find_element(By.CSS_SELECTOR, "nav a.here").text == "Collections"
    box = browser.find_element(By.ID, "collection-q")
    box.send_keys("acme")
    box.submit()
    hits = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#hits tr[data-doc]"))
    assert [h.get_attribute("data-doc") for h in hits] == ["notes/acme-invoice.txt"]
    assert "[ACME]" in hits[0].text and '"kind": "note"' in hits[0].text
    shot(browser, "page2-collections-search")
    box = browser.find_element(By.ID, "collection-q")
    box.clear()
    box.send_keys("lighthouses")
    box.submit()
    # (the last search's rows stand until the new page replaces them: wait for that first)
    wait(browser, staleness_of(hits[0]))
    hits = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#hits tr[data-doc]"))
    assert "<script>window.__pwned=3</script>" in hits[0].text  # text, never markup
    assert browser.execute_script("return window.__pwned") is None
    browser.get(f"{served.url}/collections/notes")  # a collection's documents without a search
    docs = browser.find_elements(By.CSS_SELECTOR, "#documents tr[data-doc]")
    assert len(docs) == 3
    assert "3 of 3 documents" in browser.find_element(By.ID, "result-count").text


# Each edge's path sampled every few pixels, and each node's box, in the canvas's coordinates.
EDGE_SAMPLES = """
const canvas = document.querySelector('#graph .graph-canvas') || document.getElementById('graph');
const base = canvas.getBoundingClientRect();
const boxes = [...canvas.querySelectorAll('.node')].map((n) => {
  const r = n.getBoundingClientRect();
  return {id: n.id.slice(5), l: r.left - base.left, t: r.top - base.top,
          r: r.right - base.left, b: r.bottom - base.top};
});
const edges = [...canvas.querySelectorAll('svg.edges path.edge')].map((p) => {
  const pts = [];
  const len = p.getTotalLength();
  for (let d = 0; d <= len; d += 3) { const q = p.getPointAtLength(d); pts.push([q.x, q.y]); }
  return pts;
});
return {boxes, edges};
"""


def test_the_graph_is_laid_out_in_layers(runs: Runs, served: Any, browser: Any) -> None:
    browser.get(f"{served.url}/runs/{runs.layered}")
    browser.find_element(By.CSS_SELECTOR, "#graph-box > summary").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#graph svg.edges"))
    got = browser.execute_script(EDGE_SAMPLES)
    boxes, edges = got["boxes"], got["edges"]
    assert {b["id"] for b in boxes} == {"a", "b", "c", "each"} and len(edges) == 4
    # no edge runs through a box: every point of a path lies outside every box but its two ends'
    for points in edges:
        ends = [
            b["id"]
            for b in boxes
            for x, y in (points[0], points[-1])
            if b["l"] - 3 <= x <= b["r"] + 3 and b["t"] - 3 <= y <= b["b"] + 3
        ]
        for b in boxes:
            if b["id"] in ends:
                continue
            inside = [
                (x, y)
                for x, y in points
                if b["l"] + 1 < x < b["r"] - 1 and b["t"] + 1 < y < b["b"] - 1
            ]
            assert not inside, (b["id"], inside[:3])
    # the for_each says how many elements it had, and what its "mixed" is made of
    each = browser.find_element(By.ID, "node-each")
    assert each.find_element(By.CLASS_NAME, "fe-badge").text == "for each: 3"
    assert each.find_element(By.CLASS_NAME, "node-status").text == "mixed: 2 completed, 1 failed"
    assert "mixed" in browser.find_element(By.CSS_SELECTOR, ".graph-legend").text
    row = browser.find_element(By.CSS_SELECTOR, 'tr[data-step="each"] td.st')
    assert "2 completed, 1 failed" in row.text
    # phases are frames around their steps, each with its name
    frames = browser.find_elements(By.CSS_SELECTOR, "#graph .phase-box h4")
    assert sorted(f.text for f in frames) == ["ONE", "THREE", "TWO"]
    browser.execute_script("document.getElementById('graph-box').scrollIntoView()")
    shot(browser, "page2-graph-layered")


DOCS_PICTURE = Path(__file__).resolve().parents[2] / "docs" / "run-page.png"


def test_the_docs_picture_is_this_page(runs: Runs, served: Any, browser: Any) -> None:
    """docs/run-page.png (the README's and docs/web.md's picture) is a screenshot of this page:
    RUNNER_DOCS_PICTURES=1 makes it again; otherwise it must be there, and small."""
    import io
    import os

    from PIL import Image

    browser.get(f"{served.url}/runs/{runs.cities}")
    browser.find_element(By.CSS_SELECTOR, 'button.browse[data-step="describe"]').click()
    wait(browser, lambda d: len(element_names(d)) == 3)
    browser.execute_script("document.querySelector('#browser details.element').open = true")
    browser.execute_script("window.scrollTo(0, 0)")
    browser.set_window_size(1280, 1100)
    try:
        png = browser.get_screenshot_as_png()
    finally:
        browser.set_window_size(1280, 1000)
    if os.environ.get("RUNNER_DOCS_PICTURES") == "1":
        image = Image.open(io.BytesIO(png)).convert("RGB")
        image = image.resize((960, round(image.height * 960 / image.width)), Image.LANCZOS)
        image = image.quantize(colors=128, method=Image.Quantize.MEDIANCUT)
        image.save(DOCS_PICTURE, optimize=True)
    assert DOCS_PICTURE.is_file(), "make it: RUNNER_DOCS_PICTURES=1 pytest -k docs_picture"
    assert DOCS_PICTURE.stat().st_size < 200_000
    with Image.open(DOCS_PICTURE) as pic:
        assert pic.width == 960
