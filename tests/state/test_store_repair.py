"""Issue 16 point 8: lost objects are recoverable with `runner verify --repair`.

After the object store is deleted (or an image in it is damaged), an image step used to fail
forever ("recorded as completed but its image is missing; not paying again"). The repair lists
the paid calls the next apply will make again, changes nothing without agreement, and keeps
the rest of the history.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import Project, ran
from tests.review.test_thumbnail import apply as thumb_apply
from tests.review.test_thumbnail import cli as thumb_cli
from tests.review.test_thumbnail import thumbs  # noqa: F401  # the fixture
from tests.store_damage import damage


def _lose_everything(root: Path, raw: str) -> None:
    shutil.rmtree(root / ".runner" / "objects")


def _damage_one_raw(root: Path, raw: str) -> None:
    damage(root / ".runner" / "objects" / raw[:2] / raw[2:], {"how": "flip"})


@pytest.mark.parametrize(
    ("lose", "paid_again"), [(_lose_everything, 4), (_damage_one_raw, 1)], ids=["deleted", "one"]
)
def test_repair_marks_lost_images_and_the_next_apply_pays_once_more(
    thumbs: Project, lose, paid_again: int  # noqa: F811
) -> None:
    first = thumb_apply(thumbs)
    assert first["_exit"] == 0
    lose(thumbs.root, first["iterations"][0]["assets"]["raw"])
    stuck = thumb_apply(thumbs, "-p", "overlay=false")
    assert stuck["_exit"] != 0
    assert any("not paying for it again" in (it["error"] or "") for it in stuck["iterations"])
    # off a terminal, without --yes: the plan is shown, nothing changes
    refused = thumb_cli(thumbs, "verify", "--repair", "--json")
    assert refused.exit_code == 2, refused.stdout
    plan = refused.json["repair"]
    assert plan["repaired"] is False and len(plan["paid_calls_to_make_again"]) == paid_again
    assert all(c["provider"] == "fake" for c in plan["paid_calls_to_make_again"])
    assert thumb_cli(thumbs, "verify", "--json").json["ok"] is False
    text = thumb_cli(thumbs, "verify", "--repair")
    assert text.exit_code == 2 and text.stdout.count("PAID AGAIN") == paid_again
    assert not (thumbs.root / ".runner" / "journal.db.repair").exists()
    done = thumb_cli(thumbs, "verify", "--repair", "--yes", "--json")
    assert done.exit_code == 0 and done.json["ok"] is True, done.stdout
    assert done.json["repair"]["repaired"] is True
    healed = thumb_apply(thumbs)
    assert healed["_exit"] == 0, healed
    assert [it["status"] for it in healed["iterations"]] == ["completed"] * 4
    assert thumb_cli(thumbs, "verify", "--json").json["ok"] is True
    # the history stays: every earlier run is still listed
    listed = {r["id"] for r in thumb_cli(thumbs, "runs", "list", "--json").json["runs"]}
    assert {first["run"]["id"], stuck["run"]["id"]} <= listed
    assert thumb_cli(thumbs, "verify", "--repair", "--json").json["repair"]["repaired"] is False


def test_repair_of_a_shell_output_re_creates_it_without_paid_calls(project: Project) -> None:
    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: lost
        steps:
          make:
            uses: shell
            with: {run: "mkdir -p out && echo made > out/f.txt", outputs: [out/f.txt]}
        """,
    )
    assert project.apply()["_exit"] == 0
    shutil.rmtree(project.root / ".runner" / "objects")
    res = project.cli("verify", "--repair", "--yes", "--json", "--state", ".runner")
    assert res.exit_code == 0, res.stdout
    assert res.json["repair"]["paid_calls_to_make_again"] == []
    assert len(res.json["repair"]["executions_to_rerun"]) == 1
    assert ran(project.apply()) == {"make"}
    assert project.cli("verify", "--state", ".runner", "--json").json["ok"] is True
