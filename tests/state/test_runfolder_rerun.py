"""A run folder's image views follow the run's iterations (found by the differential oracle
after cf50c58): a run waiting at its gate, continued by an apply whose image step runs again on
other inputs, puts the new image in its folder; the old view is runner's own (a stored object),
not a hand edit that verify and show name. A real hand edit still is one."""

from __future__ import annotations

import hashlib

from tests.conftest import Project

PICS = """\
    runner: 1
    name: pics
    params:
      word: {type: string, default: cats}
    steps:
      pic:
        uses: image
        with: {prompt: "a picture of ${{ params.word }}", size: "32x32", n: 1, seed: 3}
      review:
        uses: human_gate
        needs: [pic]
        with: {summary: "ok?"}
"""


def test_a_view_of_an_earlier_iteration_is_replaced_not_called_edited(project: Project) -> None:
    project.write("pipeline.yaml", PICS)
    first = project.apply()
    assert first["_exit"] == 7, first["_stderr"]
    run = first["run"]["id"]
    view = project.root / ".runner/runs" / run / "image-1.png"
    before = view.read_bytes()
    again = project.apply("-p", "word=dogs")  # the waiting run goes on: pic runs again
    assert again["_exit"] == 7 and again["run"]["id"] == run, again["_stderr"]
    assert "changed by hand" not in again["_stderr"], again["_stderr"]
    res = project.cli("verify", "--json")
    assert res.json["ok"] is True, res.json["problems"]
    now = view.read_bytes()
    assert now != before
    shown = project.cli("runs", "show", run, "--json").json
    raws = {it["assets"]["raw"] for it in shown["iterations"]}
    assert hashlib.sha256(now).hexdigest() in raws, shown["iterations"]
    # a real hand edit of the view is still named
    view.chmod(0o644)
    view.unlink()
    view.write_bytes(b"not an image")
    res = project.cli("verify", "--json")
    assert res.json["ok"] is False and "image-1.png" in str(res.json["problems"])
