"""An output a revert puts back is no hand edit (issue 44): after the inputs change and change
back, a declared output holds what the other state's run wrote (a stored object); the apply
restores the recorded output, with `on_edit: fail` too, as a fresh apply succeeds."""

from __future__ import annotations

import pytest

from tests.conftest import Project, statuses

REVERTED = """\
    runner: 1
    name: reverted
    defaults: {on_edit: POLICY}
    params:
      word: {type: string, default: one}
    steps:
      make:
        uses: shell
        with:
          run: "mkdir -p out && echo ${{ params.word }} > out/made.txt"
          outputs: [out/made.txt]
      use:
        uses: shell
        needs: [make]
        with: {run: "cat out/made.txt", inputs: [out/made.txt]}
"""


@pytest.mark.parametrize("policy", ["fail", "restore", "keep"])
def test_an_output_put_back_by_a_revert_is_no_hand_edit(project: Project, policy: str) -> None:
    project.write("pipeline.yaml", REVERTED.replace("POLICY", policy))
    out = project.root / "out/made.txt"
    assert project.apply()["_exit"] == 0
    assert project.apply("-p", "word=two")["_exit"] == 0
    assert out.read_text() == "two\n"
    # the inputs back: "make" is answered from its first result, whose file the second run
    # overwrote with its own (stored) bytes
    plan = project.cli("plan", "pipeline.yaml", "--json").json
    make = next(s for s in plan["steps"] if s["id"] == "make")
    assert make["action"] == "restore" and "another result" in " ".join(make["reasons"]), make
    back = project.apply()
    assert back["_exit"] == 0, back["_stderr"]
    assert statuses(back)["make"] == "cached" and out.read_text() == "one\n"
    assert "edited by hand" not in back["_stderr"]
    # a real hand edit is still one
    out.write_text("mine\n")
    edited = project.apply()
    if policy == "fail":
        assert edited["_exit"] == 4 and out.read_text() == "mine\n"
    elif policy == "keep":
        assert edited["_exit"] == 0 and out.read_text() == "mine\n"
    else:
        assert edited["_exit"] == 0 and out.read_text() == "one\n"
