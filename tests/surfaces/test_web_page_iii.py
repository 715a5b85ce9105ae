"""The run page, continued (issue 42, section 2's page items), in a real headless Chromium.

A re-applied run's decisions are every decision its outcome rests on, the header's status is
words, and a graph of hundreds of steps is laid out readably. One server and one browser for
the module (tests/conftest.py's ``served`` and ``browser``); screenshots go to $RUNNER_SCREENS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.surfaces.test_web_api import Site, build_site
from tests.webdriving import needs_browser, shot, wait

pytestmark = needs_browser
webdriver = pytest.importorskip("selenium.webdriver")

from selenium.webdriver.common.by import By  # noqa: E402

REVISED = """\
    runner: 1
    name: revised
    params:
      extra: {type: string, default: one}
    steps:
      draft:
        uses: shell
        with: {run: "echo 'draft ${{ feedback | join(\\",\\") }}'"}
      other:
        uses: shell
        with: {run: "echo 'other ${{ params.extra }}'"}
      review:
        uses: human_gate
        with:
          summary: "Publish this draft?"
          show: {draft: "${{ steps.draft.output.stdout }}"}
          revise: draft
      publish:
        uses: shell
        needs: [review, other]
        with: {run: "echo published"}
"""


SAME = """\
    runner: 1
    name: same
    steps:
      hello: {uses: template, with: {text: "hello"}}
"""


PEOPLE = """\
    runner: 1
    name: people
    params:
      people: {type: array, default: [{name: Ada, born: 1815}, {name: Alan, born: 1912}]}
    steps:
      greet:
        uses: template
        for_each: "${{ params.people }}"
        label: "${{ item.name }}"
        with: {text: "hello ${{ item.name }}"}
"""


@dataclass
class Runs:
    site: Site
    decided: str  # revised in round 1, approved in round 2
    again: str  # a later run that changed only `other`: both decisions given again
    same: list[str]  # three applies of an unchanged pipeline, oldest first
    people: str  # elements labelled by name, then the pipeline labels them by year


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    site = build_site(tmp_path_factory.mktemp("page3"))
    proj = site.project
    proj.write("revised.yaml", REVISED)

    def apply(*args: str) -> Any:
        return proj.cli("apply", "revised.yaml", "--json", "-q", "--state", ".runner", *args)

    first = apply()
    assert first.exit_code == 7, first.stderr
    decided = first.json["run"]["id"]
    for decision, extra in (("revise", ["--input", "feedback=shorter"]), ("approve", [])):
        res = proj.cli("decide", decided, "review", decision, *extra, "--state", ".runner")
        assert res.exit_code in (0, 7), res.stderr
    again = apply("-p", "extra=two")
    assert again.exit_code == 0, again.stderr
    assert again.json["run"]["id"] != decided
    proj.write("same.yaml", SAME)
    same = []
    for _ in range(3):
        res = proj.cli("apply", "same.yaml", "--json", "-q", "--state", ".runner")
        assert res.exit_code == 0, res.stderr
        same.append(res.json["run"]["id"])
    proj.write("people.yaml", PEOPLE)
    people = proj.cli("apply", "people.yaml", "--json", "-q", "--state", ".runner")
    assert people.exit_code == 0, people.stderr
    proj.write("people.yaml", PEOPLE.replace('item.name }}"\n', 'item.born }}"\n', 1))
    return Runs(site, decided, again.json["run"]["id"], same, people.json["run"]["id"])


@pytest.fixture(scope="module")
def site(runs: Runs) -> Site:
    return runs.site


def rounds(browser: Any) -> list[list[str]]:
    rows = browser.find_elements(By.CSS_SELECTOR, "#rounds tbody tr")
    return [[c.text for c in r.find_elements(By.TAG_NAME, "td")] for r in rows]


def test_a_reapplied_run_shows_every_decision_it_rests_on(
    runs: Runs, served: Any, browser: Any
) -> None:
    browser.get(f"{served.url}/runs/{runs.again}")
    got = rounds(browser)
    assert [(c[0], c[1], c[2]) for c in got] == [
        ("review", "1", "revise"),
        ("review", "2", "approve"),
    ]
    for cells in got:  # each says where it was decided, and links there
        assert f"given again from run {runs.decided}" in cells[5]
    link = browser.find_element(By.CSS_SELECTOR, "#rounds .given-again a")
    assert link.get_attribute("href").endswith(f"/runs/{runs.decided}")
    shot(browser, "page3-decisions-given-again")
    # the run that was asked shows the same two rounds, as decided there
    browser.get(f"{served.url}/runs/{runs.decided}")
    assert [(c[1], c[2]) for c in rounds(browser)] == [("1", "revise"), ("2", "approve")]
    assert not browser.find_elements(By.CSS_SELECTOR, "#rounds .given-again")


def test_the_header_says_the_status_in_words(runs: Runs, served: Any, browser: Any) -> None:
    browser.get(f"{served.url}/runs/{runs.site.gated}")
    status = browser.find_element(By.ID, "run-status")
    assert status.text == "waiting for review"
    assert status.get_attribute("title") == "awaiting_human"
    assert "status-awaiting_human" in status.get_attribute("class")  # still coloured as one
    review = browser.find_element(By.CSS_SELECTOR, 'tr[data-step="review"] td.st')
    assert review.text == "waiting for review"
    assert "awaiting_human" not in browser.find_element(By.TAG_NAME, "main").text
    shot(browser, "page3-status-words")


def test_unchanged_reapplies_are_one_row(runs: Runs, served: Any, browser: Any) -> None:
    browser.get(f"{served.url}/")
    group = browser.find_element(By.CSS_SELECTOR, 'tbody.run-group[data-pipeline="same"]')
    rows = group.find_elements(By.CSS_SELECTOR, "tr[data-run]")
    assert [r.get_attribute("data-run") for r in rows] == [runs.same[-1]]
    assert rows[0].get_attribute("data-folded") == ",".join(runs.same[-2::-1])
    note = rows[0].find_element(By.CSS_SELECTOR, ".repeats")
    assert note.text == f"unchanged since {runs.same[0]}: 2 earlier runs folded"
    link = note.find_element(By.TAG_NAME, "a").get_attribute("href")
    assert link.endswith(f"/runs/{runs.same[0]}")
    assert "1 run" in group.find_element(By.CSS_SELECTOR, "tr.group-head").text
    # the list follows the API each second: the folded runs it lists are not news (no reload)
    browser.execute_script("window.__stayed = true")
    import time

    time.sleep(2.5)
    assert browser.execute_script("return window.__stayed") is True
    shot(browser, "page3-runs-folded")
    # the newest run's page says what it repeats
    rows[0].find_element(By.CSS_SELECTOR, "td a").click()
    repeats = wait(browser, lambda d: d.find_elements(By.ID, "run-repeats"))[0]
    assert repeats.text.startswith(f"{runs.same[1]} an unchanged re-apply")


def test_an_old_runs_elements_keep_the_names_it_gave_them(
    runs: Runs, served: Any, browser: Any
) -> None:
    browser.get(f"{served.url}/runs/{runs.people}")
    browser.find_element(By.CSS_SELECTOR, 'button.browse[data-step="greet"]').click()
    names = (
        "return [...document.querySelectorAll('#browser-body details.element > summary')]"
        ".map((s) => s.querySelector('strong').textContent + ' ' +"
        " (s.querySelector('.el-label') || {textContent: ''}).textContent)"
    )
    # the pipeline now labels by year; the run named its elements by name, and keeps them
    wait(browser, lambda d: d.execute_script(names) == ["#0 Ada", "#1 Alan"])
    browser.find_element(By.ID, "browser-search").send_keys("alan")
    wait(browser, lambda d: d.execute_script(names) == ["#1 Alan"])
    shot(browser, "page3-labels-journaled")


def _big(name: str, lines: list[str]) -> str:
    return "\n".join(["runner: 1", f"name: {name}", *lines]) + "\n"


def _phased() -> str:
    """450 steps in three phases: b_i reads a_i, c_j reads b_4j..b_4j+3; b7 fails."""
    lines = ["phases: [make, join, ship]", "steps:"]
    for i in range(200):
        lines += [f"  a{i}:", "    uses: template", "    phase: make", f"    with: {{text: a{i}}}"]
    for i in range(200):
        text = "${{ steps.a" + str(i) + ".output.text }}"
        if i == 7:  # one that fails: its group says so, and names it
            lines += [f"  b{i}:", "    uses: shell", "    phase: join", f"    needs: [a{i}]"]
            lines += ["    with: {run: 'exit 3'}"]
            continue
        lines += [
            f"  b{i}:",
            "    uses: template",
            "    phase: join",
            f'    with: {{text: "{text}"}}',
        ]
    for j in range(50):
        needs = ", ".join(f"b{4 * j + k}" for k in range(4))
        lines += [f"  c{j}:", "    uses: template", "    phase: ship", f"    needs: [{needs}]"]
        lines += [f"    with: {{text: c{j}}}"]
    return _big("big", lines)


def _chain(n: int) -> str:
    lines = ["steps:", "  s0: {uses: template, with: {text: s0}}"]
    lines += [
        f"  s{i}: {{uses: template, needs: [s{i - 1}], with: {{text: s{i}}}}}" for i in range(1, n)
    ]
    return _big("chain", lines)


@pytest.fixture(scope="module")
def big_runs(runs: Runs) -> dict[str, str]:
    proj = runs.site.project
    out = {}
    for name, text in (("big", _phased()), ("chain", _chain(401))):
        proj.write(f"{name}.yaml", text)
        res = proj.cli("apply", f"{name}.yaml", "--json", "-q", "--state", ".runner", "--jobs", "8")
        assert res.exit_code in (0, 6), res.stderr
        out[name] = res.json["run"]["id"]
    return out


def _boxes(browser: Any, selector: str) -> list[dict[str, float]]:
    found: list[dict[str, float]] = browser.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((n) => {"
        " const r = n.getBoundingClientRect();"
        " return {l: r.left, t: r.top, r: r.right, b: r.bottom}; })",
        selector,
    )
    return found


def _apart(boxes: list[dict[str, float]]) -> bool:
    return all(
        a["r"] <= b["l"] or b["r"] <= a["l"] or a["b"] <= b["t"] or b["b"] <= a["t"]
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
    )


def test_a_graph_of_hundreds_of_steps_is_summarised(
    big_runs: dict[str, str], served: Any, browser: Any
) -> None:
    browser.get(f"{served.url}/runs/{big_runs['big']}")
    browser.find_element(By.CSS_SELECTOR, "#graph-box > summary").click()
    groups = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#graph .group-node"))
    assert [g.get_attribute("data-group") for g in groups] == ["make", "join", "ship"]
    text = {g.get_attribute("data-group"): g.text for g in groups}
    assert "200 steps" in text["make"] and "200 completed" in text["make"]
    assert "199 completed, 1 failed" in text["join"]
    assert "49 completed, 1 not run" in text["ship"]
    attention = groups[1].find_elements(By.CSS_SELECTOR, ".group-attention .step-chip")
    assert [c.text for c in attention] == ["b7"]  # what needs a look is named
    assert not browser.find_elements(By.CSS_SELECTOR, "#graph .node:not(.group-node)")
    assert _apart(_boxes(browser, "#graph .group-node"))
    links = {
        (x.get_attribute("data-from"), x.get_attribute("data-to")): x.text
        for x in browser.find_elements(By.CSS_SELECTOR, "#graph .group-link")
    }
    assert links == {("make", "join"): "200 edges", ("join", "ship"): "200 edges"}
    canvas = browser.find_element(By.CSS_SELECTOR, "#graph .graph-summary")
    assert canvas.size["width"] < 1280 and canvas.size["height"] < 900  # one screen, readable
    shot(browser, "page3-graph-summary")
    # a step named in its group is drawn with what it reads and what reads it
    attention[0].click()
    near = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#graph-near .node"))
    assert sorted(n.get_attribute("id") for n in near) == ["node-a7", "node-b7", "node-c1"]
    assert "focus" in browser.find_element(By.ID, "node-b7").get_attribute("class")
    assert "reads 1, read by 1" in browser.find_element(By.CSS_SELECTOR, ".near-title").text
    assert _apart(_boxes(browser, "#graph-near .node"))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#graph-near svg.edges path.edge")) == 2
    # or found by name
    find = browser.find_element(By.ID, "graph-find")
    find.clear()
    find.send_keys("c3")
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#graph-near .node")) == 5)
    ids = [
        n.get_attribute("id") for n in browser.find_elements(By.CSS_SELECTOR, "#graph-near .node")
    ]
    assert sorted(ids) == ["node-b12", "node-b13", "node-b14", "node-b15", "node-c3"]
    browser.execute_script("document.getElementById('graph-near').scrollIntoView()")
    shot(browser, "page3-graph-near")
    # a group's steps, listed on asking
    groups[2].find_element(By.CLASS_NAME, "group-open").click()
    chips = browser.find_elements(By.CSS_SELECTOR, "#graph-group-steps .step-chip")
    assert len(chips) == 50 and chips[0].text == "c0"


def test_a_long_chain_without_phases_is_summarised_by_depth(
    big_runs: dict[str, str], served: Any, browser: Any
) -> None:
    browser.get(f"{served.url}/runs/{big_runs['chain']}")
    browser.find_element(By.CSS_SELECTOR, "#graph-box > summary").click()
    groups = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#graph .group-node"))
    names = [g.get_attribute("data-group") for g in groups]
    assert len(names) == 12 and names[0] == "depth 1-34" and names[-1] == "depth 375-401"
    sizes = [g.find_element(By.CLASS_NAME, "group-size").text for g in groups]
    assert sizes == ["34 steps"] * 11 + ["27 steps"]
    assert len(browser.find_elements(By.CSS_SELECTOR, "#graph .group-link")) == 11
    boxes = _boxes(browser, "#graph .group-node")
    assert _apart(boxes)
    # twelve groups in a line read top to bottom, within the page's width
    assert [b["t"] for b in boxes] == sorted(b["t"] for b in boxes)
    assert max(b["r"] for b in boxes) < 1280
    shot(browser, "page3-graph-chain")
