"""Export never silently overwrites another run's files; --picked; iterate says what it used."""

from __future__ import annotations

from tests.conftest import Project
from tests.review.test_thumbnail import apply, cli, thumbs

__all__ = ["thumbs"]


def test_export_refuses_another_runs_files_unless_overwrite(thumbs: Project) -> None:
    first = apply(thumbs)["run"]["id"]
    second = apply(thumbs, "-p", "seed=7")["run"]["id"]
    assert cli(thumbs, "export", first, "--to", "out").exit_code == 0
    before = {p.name: p.read_bytes() for p in (thumbs.root / "out").iterdir()}
    again = cli(thumbs, "export", first, "--to", "out")  # the same files: nothing to refuse
    assert again.exit_code == 0 and again.stdout.splitlines()[0] == "wrote out/dQw4w9WgXcQ-1.jpg"
    refused = cli(thumbs, "export", second, "--to", "out")
    assert refused.exit_code == 2
    assert "out/dQw4w9WgXcQ-1.jpg and 3 more files exist with other content" in refused.stderr
    assert "--overwrite" in refused.stderr and "nothing was written" in refused.stderr
    assert {p.name: p.read_bytes() for p in (thumbs.root / "out").iterdir()} == before
    forced = cli(thumbs, "export", second, "--to", "out", "--overwrite", "--json")
    assert forced.exit_code == 0 and len(forced.json["files"]) == 4
    assert {p.name: p.read_bytes() for p in (thumbs.root / "out").iterdir()} != before


def test_export_picked_only(thumbs: Project) -> None:
    run_id = apply(thumbs)["run"]["id"]
    none = cli(thumbs, "export", run_id, "--to", "picked", "--picked")
    assert none.exit_code == 2 and f"runner pick {run_id}" in none.stderr
    cli(thumbs, "pick", run_id, "3")
    doc = cli(thumbs, "export", run_id, "--to", "picked", "--picked", "--json").json
    assert doc["picked"] is True and doc["iteration_id"] == f"{run_id}-3"
    assert [p.name for p in (thumbs.root / "picked").iterdir()] == ["dQw4w9WgXcQ-3.jpg"]


def test_iterate_says_which_vars_it_used(thumbs: Project) -> None:
    run_id = apply(thumbs, "-p", "vars={subject: a red fox, style: noir}")["run"]["id"]
    cli(thumbs, "pick", run_id, "2")
    res = cli(thumbs, "iterate", run_id, "--n", "1", "--var", "style=pastel", "-q")
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == f"iterating on #2 of run {run_id}"
    assert lines[1] == 'vars used (only --var): style="pastel"'
    assert lines[2].startswith('parent vars not used: subject="a red fox"')
    assert lines[3] == "prompt (as sent, with the reference image):"  # the whole of it
    assert lines[4] == '  A striking YouTube thumbnail for the video "Never Gonna Give You Up".'
    assert lines[5] == "  Style: pastel."
    doc = cli(thumbs, "iterate", run_id, "--n", "1", "--json", "-q").json
    assert doc["iterate"]["vars"] == {} and doc["iterate"]["not_inherited"] == ["style", "subject"]
    assert doc["iterate"]["parent_vars"] == {"subject": "a red fox", "style": "noir"}
