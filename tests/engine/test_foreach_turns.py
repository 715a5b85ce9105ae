"""A for_each's `concurrency` bounds the elements that run, not those answered without running:
an element whose result is cached takes no turn, and every element's arguments and key are
worked out before it waits for one (interpreter._for_each). Real apply, real journal."""

from __future__ import annotations

import sqlite3

from tests.conftest import Project
from tests.providers.loadserver import LoadServer

PIPELINE = """\
runner: 1
name: turns
params:
  slow: {type: string, default: "a"}
steps:
  each:
    uses: shell
    for_each: ["${{ params.slow }}", "b", "c", "d"]
    concurrency: 1
    with:
      run: "sleep 0.3; echo ${{ item }} > out/${{ index }}.txt"
      outputs: ["out/${{ index }}.txt"]
"""


def _events(project: Project, run_id: str) -> list[tuple[str, int | None]]:
    db = sqlite3.connect(project.root / ".runner" / "journal.db")
    try:
        rows = db.execute(
            "SELECT type, element FROM events WHERE run_id=? AND step_id='each' ORDER BY seq",
            (run_id,),
        ).fetchall()
    finally:
        db.close()
    return [(t, e) for t, e in rows]


def test_cached_elements_do_not_wait_behind_a_running_one(project: Project) -> None:
    project.write("pipeline.yaml", PIPELINE)
    (project.root / "out").mkdir()
    first = project.apply("--state", ".runner")
    assert first["_exit"] == 0, first
    # Only element 0's input changes: it runs (holding the one turn for 0.3 s); 1-3 are cached.
    again = project.apply("--state", ".runner", "-p", "slow=z")
    assert again["_exit"] == 0, again
    assert again["steps"][0]["elements"] == {"total": 4, "ran": 1, "cached": 3}
    events = _events(project, again["run"]["id"])
    done = events.index(("StepPassed", 0))
    answered = [i for i, (kind, el) in enumerate(events) if el in (1, 2, 3)]
    assert len(answered) == 3 and all(i < done for i in answered), events
    assert (project.root / "out" / "0.txt").read_text() == "z\n"


def test_concurrency_still_bounds_the_elements_that_run(project: Project) -> None:
    project.write("pipeline.yaml", PIPELINE.replace("sleep 0.3; ", ""))
    (project.root / "out").mkdir()
    doc = project.apply("--state", ".runner")
    assert doc["_exit"] == 0, doc
    events = _events(project, doc["run"]["id"])
    # concurrency 1: each element that runs starts only after the one before it passed
    order = [(kind, el) for kind, el in events if kind in ("StepStarted", "StepPassed")]
    assert order == [(k, el) for el in range(4) for k in ("StepStarted", "StepPassed")], order


ASKING = """\
runner: 1
name: asking
steps:
  each:
    uses: llm
    for_each: ["a", "b", "c", "d", "e", "f"]
    concurrency: 2
    retries: 1
    with: {prompt: "say ${{ item }}"}
    check:
      - "${{ item != 'b' or 'Previous attempt' in output.text }}"
"""


def test_an_element_gives_its_turn_when_its_reply_lands(project: Project) -> None:
    # The next element's call goes out before the element that got its reply has recorded it;
    # element b fails its check once and takes a turn again before any new element does.
    with LoadServer(delay=0.2) as server:
        project.write(
            "runner.toml",
            f"""\
            [general]
            default_provider = "openai"

            [providers.openai]
            base_url = "{server.url}/v1"
            model = "test-chat"
            max_concurrency = 16
            """,
        )
        project.write("pipeline.yaml", ASKING)
        doc = project.apply("--state", ".runner")
    assert doc["_exit"] == 0, doc["_stderr"]
    assert doc["steps"][0]["elements"] == {"total": 6, "ran": 6}
    assert server.served == 7 and server.max_in_flight == 2  # the step's concurrency holds
    events = _events(project, doc["run"]["id"])
    first_passed = events.index(next(e for e in events if e[0] == "StepPassed"))
    started = [el for kind, el in events[:first_passed] if kind == "StepStarted"]
    assert started[:2] == [0, 1] and 2 in started, events
    # b's second attempt started before e: a turn given back goes to an element calling again
    assert events.index(("StepStarted", 1), events.index(("StepStarted", 1)) + 1) < events.index(
        ("StepStarted", 4)
    ), events
