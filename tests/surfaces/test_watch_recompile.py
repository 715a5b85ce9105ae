"""A watch process recompiles its pipeline after every edit, in the same process: what it
compiles then must equal what a fresh process compiles from the same files. The process keeps
caches across compiles (resolved paths, a directory's symlinks, parsed schemas, compiled
expressions); none may hand back a step as it was before an edit of the step's text, of a
param, or of a file the compile looks at (a directory replaced by a symlink pointing out of the
root, a file a `read` step names deleted, one of many outputs in one directory turned into a
symlink)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from runner import expr as ex
from runner.surfaces.watch import Watcher, WatchOptions

PIPELINE = """\
runner: 1
name: recompile
params:
  greeting: {type: string, default: hello}
steps:
  a:
    uses: shell
    with:
      run: "echo ${{ params.greeting }} > sub/a.txt"
      inputs: [src/in.txt]
      outputs: [sub/a.txt]
  data:
    uses: read
    with: {path: src/data.txt}
  b:
    uses: shell
    with:
      run: "cat sub/a.txt > out/b.txt"
      inputs: [sub/a.txt]
      outputs: [out/b.txt]
  many:
    uses: shell
    with:
      run: "touch many/*"
      outputs: [MANY]
"""

MANY = [f"many/f{i:02d}.txt" for i in range(24)]

# What one compile gives, as JSON: every field of every step, locations as file:line:column
# (a reused step would point at its old lines), expressions by their text and location.
SUMMARY = """
import dataclasses, json, sys
from pathlib import Path
from runner import expr as ex
from runner.errors import RunnerError
from runner.pipeline.compiler import compile_pipeline

def value(v):
    if isinstance(v, ex.Interpolation):
        return {"parts": [value(p) for p in v.parts]}
    if isinstance(v, dict):
        return {k: value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [value(x) for x in v]
    if hasattr(v, "source") and hasattr(v, "where"):
        return {"expr": v.source, "where": str(v.where)}
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return repr(v)

def summary(compile):
    try:
        plan = compile()
    except RunnerError as exc:
        return {"error": str(exc), "where": str(exc.where), "step": exc.step}
    steps = {}
    for sid in plan.order:
        s = plan.steps[sid]
        fields = {f.name: getattr(s, f.name) for f in dataclasses.fields(s)}
        fields["type"] = s.type.name
        fields["where"] = str(s.where)
        steps[sid] = {k: value(v) for k, v in fields.items()}
    return {"order": plan.order, "params": plan.params, "steps": steps}
"""

namespace: dict[str, Any] = {}
exec(SUMMARY, namespace)  # the same summary here and in the fresh process


def fresh(root: Path) -> Any:
    """The summary a new process compiles from the files as they are now."""
    code = SUMMARY + ("print(json.dumps(summary(lambda: compile_pipeline(Path('pipeline.yaml')))))")
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def write(root: Path, text: str) -> None:
    text = text.replace("[MANY]", json.dumps(MANY))
    (root / "pipeline.yaml").write_text(text, encoding="utf-8")


def test_every_recompile_after_an_edit_equals_a_fresh_compile(
    tmp_path: Path, monkeypatch: Any
) -> None:
    root = tmp_path / "root"
    for d in ("src", "sub", "out", "many"):
        (root / d).mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (root / "src" / "in.txt").write_text("in\n")
    (root / "src" / "data.txt").write_text("data\n")
    write(root, PIPELINE)
    monkeypatch.chdir(root)
    watcher = Watcher(root / "pipeline.yaml", WatchOptions(), on_cycle=lambda _c: None)

    def in_process() -> Any:
        got = namespace["summary"](watcher._compile)
        return json.loads(json.dumps(got))  # tuples as lists, as the fresh one's JSON

    def same() -> Any:
        here = in_process()
        assert here == fresh(root)
        return here

    first = same()
    assert first["steps"]["b"]["deps"] == ["a"]

    # The step's text: its command, and lines added above it (every location below moves).
    write(
        root, PIPELINE.replace("echo ${{ params.greeting }}", "printf '%s' ${{ params.greeting }}")
    )
    assert same() != first
    moved = PIPELINE.replace("steps:\n", "steps:\n  # a comment\n  # and another\n")
    write(root, moved)
    shifted = same()
    assert shifted["steps"]["a"]["where"] != first["steps"]["a"]["where"]

    # A param's default.
    write(root, moved.replace("default: hello", "default: bonjour"))
    assert same()["params"] == {"greeting": "bonjour"}

    # A file the compile reads: the directory of a's output becomes a symlink pointing out.
    (root / "sub").rmdir()
    os.symlink(tmp_path / "outside", root / "sub")
    assert "escapes" in same()["error"]
    os.unlink(root / "sub")
    (root / "sub").mkdir()
    assert "error" not in same()

    # One of many outputs in one directory (listed once for its symlinks) becomes a link out.
    os.symlink(tmp_path / "outside" / "x", root / "many" / "f07.txt")
    assert "escapes" in same()["error"]
    os.unlink(root / "many" / "f07.txt")
    assert "error" not in same()

    # The file a `read` step names is deleted.
    (root / "src" / "data.txt").unlink()
    assert "file not found" in same()["error"]


def test_the_summary_sees_expressions_and_their_locations() -> None:
    """The comparison above is only as good as its summary: an expression is compared by its
    text and location, not skipped."""
    compiled = ex.compile_value("say ${{ params.x }}", lambda p: None)
    assert namespace["value"](compiled) == {
        "parts": ["say ", {"expr": "params.x", "where": "None"}]
    }
