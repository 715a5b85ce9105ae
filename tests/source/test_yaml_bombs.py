"""Memory bombs under the alias count (issue 33 item 7): what a document expands to is bounded.

- ALIASED TEXT: aliases may repeat at most MAX_ALIAS_CHARS characters of text, counted on the
  node tree before anything is built (a 4 MiB string aliased 90,000 times was a 4.4 MB pipeline
  `validate` called valid; apply took 55 s and 9 GB, then MemoryError), in a pipeline, a data
  file (`read {as: yaml}`) and a `-p` value (which reached SQLite as a 1 GB text: DataError);
  scalar aliases count toward the value bound too;
- LONG QUOTED SCALARS: a quoted scalar costs memory in proportion to its length (a 47 MB
  double-quoted one took 6 GB in the line reader's regular expression);
- TOO LARGE TO STORE: params and records over what SQLite takes are clear errors;
- a bounded Hypothesis property: for generated documents with anchors and aliases, the reader
  refuses exactly those whose aliases repeat more than the bound, and reads the others as
  PyYAML does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.errors import InvalidPipeline, Location, UsageError
from runner.pipeline.loader import read_override
from runner.source import _fullyaml
from runner.source.document import MAX_ALIAS_CHARS, MAX_ALIAS_VALUES, load_data, parse_text
from runner.state import records
from runner.state.canonical import CanonicalError

MiB = 1024 * 1024


def _runner(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_long_string_aliased_many_times_is_refused_at_the_alias() -> None:
    text = f'a: &a "{"x" * MiB}"\nb: [{", ".join(["*a"] * 20)}]\n'
    with pytest.raises(InvalidPipeline, match="repeat over 16,000,000 characters") as info:
        parse_text(text, "p.yaml")
    assert info.value.where == Location("p.yaml", 2, 1)  # the key holding the aliases


def test_aliased_text_within_the_bound_is_read() -> None:
    n = MAX_ALIAS_CHARS // MiB
    data = load_data(f'a: &a "{"x" * MiB}"\nb: [{", ".join(["*a"] * n)}]\n', "d.yaml")
    assert len(data["b"]) == n and data["b"][0] == "x" * MiB


def test_text_inside_an_aliased_collection_counts_with_its_keys() -> None:
    inner = f'{{"{"k" * 1000}": "{"v" * 999_000}"}}'  # one million characters, key included
    text = f"a: &a [{inner}]\nb: [{', '.join(['*a'] * 17)}]\n"
    with pytest.raises(InvalidPipeline, match="characters"):
        parse_text(text, "p.yaml")
    ok = f"a: &a [{inner}]\nb: [{', '.join(['*a'] * 16)}]\n"
    assert len(parse_text(ok, "p.yaml").data["b"]) == 16


def test_scalar_aliases_count_toward_the_value_bound() -> None:
    text = "a: &a x\nb: [" + ", ".join(["*a"] * (MAX_ALIAS_VALUES + 1)) + "]\n"
    with pytest.raises(InvalidPipeline, match="repeat over 100000 values"):
        load_data(text, "d.yaml")


def test_validate_refuses_the_4mib_by_90000_pipeline_quickly(tmp_path: Path) -> None:
    big = "A" * (4 * MiB)
    (tmp_path / "runner.toml").write_text("")
    (tmp_path / "p.yaml").write_text(
        "runner: 1\nname: bomb\nparams:\n"
        f'  big: {{type: string, default: &a "{big}"}}\n'
        f"  many: {{type: array, default: [{', '.join(['*a'] * 90_000)}]}}\n"
        'steps:\n  s: {uses: shell, with: {run: "true"}}\n'
    )
    done = _runner(tmp_path, "validate", "p.yaml")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "p.yaml:5:" in done.stderr and "characters" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_read_as_yaml_of_an_alias_bomb_fails_the_step_with_its_place(tmp_path: Path) -> None:
    (tmp_path / "runner.toml").write_text("")
    (tmp_path / "data.yaml").write_text(f"a: &a {'B' * MiB}\nb: [{', '.join(['*a'] * 50)}]\n")
    (tmp_path / "p.yaml").write_text(
        "runner: 1\nname: readbomb\nsteps:\n  r: {uses: read, with: {path: data.yaml, as: yaml}}\n"
    )
    done = _runner(tmp_path, "apply", "p.yaml")
    assert done.returncode != 0
    assert "data.yaml:2:" in done.stderr + done.stdout, done.stderr
    assert "characters" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr


def test_an_alias_bomb_in_a_p_value_is_a_usage_error_not_a_sqlite_traceback(
    tmp_path: Path,
) -> None:
    (tmp_path / "runner.toml").write_text("")
    (tmp_path / "p.yaml").write_text(
        "runner: 1\nname: pbomb\nparams:\n  x: {type: array, default: []}\n"
        'steps:\n  s: {uses: shell, with: {run: "true"}}\n'
    )
    value = '[&a "' + "D" * 65536 + '", ' + ", ".join(["*a"] * 300) + "]"
    done = _runner(tmp_path, "apply", "p.yaml", "-p", f"x={value}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "characters" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "DataError" not in done.stderr


@pytest.mark.parametrize(
    "text",
    [
        'x: "' + "C" * (2 * MiB) + '"\n',
        "x: '" + "C" * (2 * MiB) + "'\n",
        'x: "' + "\\t" * MiB + '"\n',
        "x: ['" + "C" * (2 * MiB) + "']\n",
        'x: {y: "' + "C" * (2 * MiB) + '"}\n',
    ],
    ids=["double", "single", "escapes", "flow-single", "flow-double"],
)
def test_a_long_quoted_scalar_costs_memory_in_proportion(text: str) -> None:
    tracemalloc.start()
    try:
        data = load_data(text, "d.yaml")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(json.dumps(data)) > MiB
    assert peak < 12 * len(text), peak  # was ~130 bytes a character in the line reader


def test_a_long_single_quoted_p_value_costs_memory_in_proportion() -> None:
    raw = "'" + "C" * (2 * MiB) + "'"
    tracemalloc.start()
    try:
        value = read_override("t", raw, "string")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert value == "C" * (2 * MiB)
    assert peak < 12 * len(raw), peak


def test_params_too_large_to_store_are_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.pipeline import loader

    monkeypatch.setattr(loader, "MAX_PARAMS_CHARS", 2_000_000)
    src = parse_text("params:\n  t: {type: string}\n", "p.yaml")
    doc = loader.PipelineDoc(tmp_path / "p.yaml", src, src.data)
    with pytest.raises(UsageError, match="over the limit of 2 million"):
        loader.resolve_params(doc, {"t": "x" * 3_000_000})


def test_a_record_too_large_for_sqlite_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "MAX_RECORD_BYTES", 1000)
    assert records.dumps("é" * 100) == json.dumps("é" * 100, ensure_ascii=False)
    with pytest.raises(
        CanonicalError, match="over the 1,000 bytes the journal stores in one record"
    ):
        records.dumps({"text": "é" * 600})


# -- the property ---------------------------------------------------------------------------

LIMIT = 2_000  # the bound, made small so that generated documents cross it


@st.composite
def documents(draw: st.DrawFn) -> tuple[str, int]:
    """A YAML document of top-level keys whose values hold anchors and aliases of earlier keys'
    anchors, and the characters of its scalars as written (each once)."""
    anchors: list[str] = []
    written = 0

    def node(depth: int) -> str:
        nonlocal written
        kind = draw(st.integers(0, 5 if anchors else 3))
        if kind >= 4:
            return "*" + draw(st.sampled_from(anchors))
        if kind == 0 or depth > 2:
            text = "s" * draw(st.integers(0, 300))
            written += len(text)
            return f'"{text}"'
        items = [node(depth + 1) for _ in range(draw(st.integers(0, 4)))]
        if kind == 1:
            return "[" + ", ".join(items) + "]"
        keys = [f"k{i}" for i in range(len(items))]
        written += sum(len(k) for k in keys)
        return "{" + ", ".join(f"{k}: {v}" for k, v in zip(keys, items, strict=True)) + "}"

    lines = []
    for i in range(draw(st.integers(1, 8))):
        value = node(0)
        written += len(f"t{i}")
        if draw(st.booleans()) and not value.startswith("*"):
            value = f"&a{i} {value}"
            anchors.append(f"a{i}")
        lines.append(f"t{i}: {value}")
    return "\n".join(lines) + "\n", written


def _chars(value: Any) -> int:
    """Characters of every string in ``value``, keys included, shared values counted anew."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_chars(v) for v in value)
    if isinstance(value, dict):
        return sum(len(k) + _chars(v) for k, v in value.items())
    return 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_the_bound_refuses_exactly_what_aliases_expand_past_it(doc: tuple[str, int]) -> None:
    text, written = doc
    expected = yaml.safe_load(text)
    repeated = _chars(expected) - written
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_fullyaml, "MAX_ALIAS_CHARS", LIMIT)
        if repeated > LIMIT:
            with pytest.raises(InvalidPipeline, match="characters"):
                parse_text(text, "d.yaml")
        else:
            assert parse_text(text, "d.yaml").data == expected


def test_an_output_too_large_to_store_fails_the_run_in_words(tmp_path: Path) -> None:
    """A real apply with the record limit lowered (a 1 GB output is too slow for CI): the run
    ends failed with the size named, no sqlite3.DataError traceback, nothing left running."""
    (tmp_path / "runner.toml").write_text("")
    (tmp_path / "p.yaml").write_text(
        "runner: 1\nname: big\nsteps:\n"
        "  s: {uses: shell, with: {run: \"head -c 20000 /dev/zero | tr '\\\\0' x\"}}\n"
    )
    lowered = (
        "import sys; from runner.state import records; records.MAX_RECORD_BYTES = 10_000; "
        "from runner.surfaces.cli.app import main; sys.argv[0] = 'runner'; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", lowered, "apply", "p.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "over the 10,000 bytes the journal stores in one record" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "DataError" not in done.stderr
    listed = _runner(tmp_path, "runs", "list", "--json")
    assert [r["status"] for r in json.loads(listed.stdout)["runs"]] == ["failed"], listed.stdout
