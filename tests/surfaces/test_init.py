"""`runner init`: the starter project shows the thing runner is for (a model call, journaled),
and init says what it created and what it found there already."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Project


def test_the_starter_asks_a_model_on_the_fake_provider_and_reuses_the_reply(
    tmp_path: Path,
) -> None:
    proj = Project(tmp_path)
    assert proj.cli("init", ".").exit_code == 0
    first = proj.apply()
    assert first["_exit"] == 0, first
    ran = {s["id"]: s["status"] for s in first["steps"]}
    assert ran == {"prompt": "ran", "greet": "ran", "shout": "ran"}, ran
    # the fake provider's reply to the rendered prompt, shouted by the shell step
    shouted = (tmp_path / "out/shout.txt").read_text()
    assert "WRITE A ONE-LINE GREETING FOR: HELLO, WORLD" in shouted
    assert (tmp_path / "out/greeting.txt").read_text().upper() == shouted
    again = proj.apply()
    assert {s["status"] for s in again["steps"]} == {"cached"}  # never paid twice
    checked = proj.cli("check", "pipeline.yaml", "--strict")
    assert checked.exit_code == 0, checked.stdout + checked.stderr


def test_init_in_a_project_says_which_files_it_kept(tmp_path: Path) -> None:
    proj = Project(tmp_path)
    proj.write("pipeline.yaml", "runner: 1\nname: mine\nsteps: {}\n")
    res = proj.cli("init", ".")
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "created runner.toml" in lines and "created prompts/hello.j2" in lines
    assert "kept pipeline.yaml: already there, left as they are (init never overwrites)" in lines
    assert lines[-1] == "next: runner apply pipeline.yaml"  # no `cd .`
    assert (tmp_path / "pipeline.yaml").read_text().startswith("runner: 1\nname: mine")

    again = proj.cli("init", ".", "--json")
    assert again.json["created"] == []
    assert again.json["kept"] == ["runner.toml", "pipeline.yaml", "prompts/hello.j2"]
    words = proj.cli("init", ".").stdout.splitlines()
    assert words[0].startswith("kept runner.toml, pipeline.yaml, prompts/hello.j2: ")


def test_init_of_a_new_folder_says_where_to_go(tmp_path: Path) -> None:
    res = Project(tmp_path).cli("init", "my project")
    assert res.exit_code == 0
    assert "kept" not in res.stdout
    assert res.stdout.splitlines()[-1] == "next: cd 'my project' && runner apply pipeline.yaml"


def test_init_says_it_updated_an_existing_gitignore(tmp_path: Path) -> None:
    proj = Project(tmp_path)
    proj.write(".gitignore", "node_modules/\n")
    res = proj.cli("init", ".")
    assert "updated .gitignore: it ignores .runner/ and exports/ now" in res.stdout.splitlines()
    assert "created .gitignore" not in res.stdout
    assert (tmp_path / ".gitignore").read_text() == "node_modules/\n.runner/\nexports/\n"
    (tmp_path / "new").mkdir()
    fresh = Project(tmp_path / "new").cli("init", ".")
    assert "created .gitignore" in fresh.stdout.splitlines()
