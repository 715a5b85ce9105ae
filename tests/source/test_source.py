"""runner.source.document: pipelines and data read as YAML 1.2 (core schema), as JSON can carry them.

The refusals (tags, NaN, keys, aliases, bytes) each have a file in tests/bad_pipelines/ and
tests/bad_data/; this file holds what is read as typed, the alias bound's exact edge, and a real
`runner apply` rendering YAML 1.1's booleans, octal and base-60 numbers as written.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runner.errors import InvalidPipeline, Location
from runner.source.document import (
    MAX_ALIAS_VALUES,
    MAX_FILE_BYTES,
    MAX_VALUES,
    data_digest,
    document_data,
    load_data,
    parse_file,
    parse_text,
)
from tests.conftest import runner_bin

CORE = [
    # YAML 1.1 (PyYAML's default) read these as booleans, octal, base 60 or dates
    ("NO", "NO"),
    ("no", "no"),
    ("on", "on"),
    ("Off", "Off"),
    ("yes", "yes"),
    ("y", "y"),
    ("010", 10),
    ("0010", 10),
    ("12:30", "12:30"),
    ("1:20:30", "1:20:30"),
    ("2024-01-01", "2024-01-01"),
    ("2024-01-01T10:00:00Z", "2024-01-01T10:00:00Z"),
    ("1_000", "1_000"),
    ("0b101", "0b101"),
    ("=", "="),
    ("<<", "<<"),
    # the core schema's own
    ("0o17", 15),
    ("0x1F", 31),
    ("-5", -5),
    ("+5", 5),
    ("0", 0),
    ("1.5", 1.5),
    ("-.5", -0.5),
    ("1e3", 1000.0),
    ("1.", 1.0),
    ("6.02E+23", 6.02e23),
    ("true", True),
    ("True", True),
    ("TRUE", True),
    ("false", False),
    ("FALSE", False),
    ("null", None),
    ("Null", None),
    ("~", None),
    ("", None),
    ("'010'", "010"),
    ('"true"', "true"),
    ("!!str 12", "12"),
    ("!!int '12'", 12),
    ("!!float 1", 1.0),
    ("!!null ''", None),
    ("!!bool 'true'", True),
    ("tRUE", "tRUE"),
    ("nan", "nan"),
    ("inf", "inf"),
    ("0x", "0x"),
    ("1e", "1e"),
]


@pytest.mark.parametrize(("text", "value"), CORE)
def test_a_scalar_is_read_as_the_core_schema_says(text: str, value: Any) -> None:
    data = parse_text(f"v: {text}\n", "f.yaml").data
    assert data == {"v": value} and type(data["v"]) is type(value)


def test_a_step_named_on_is_a_string_key() -> None:
    data = parse_text("steps:\n  on: {uses: shell}\n  off: {uses: shell}\n", "p.yaml").data
    assert list(data["steps"]) == ["on", "off"]


def test_anchors_and_aliases_within_the_bound_are_expanded() -> None:
    text = "d: &d {retries: 2, timeout: 5m}\na: {x: *d}\nb: {x: *d}\n"
    data = parse_text(text, "p.yaml").data
    assert data["a"]["x"] == data["b"]["x"] == {"retries": 2, "timeout": "5m"}
    assert data["a"]["x"] is not data["b"]["x"]  # each a value of its own, as written


def test_the_alias_bound_is_exact_and_counts_a_repeated_value_once() -> None:
    # One anchored list of MAX_ALIAS_VALUES values (the list itself and its strings).
    big = "[" + ", ".join(["x"] * (MAX_ALIAS_VALUES - 1)) + "]"
    once = f"a: &a {big}\nb: *a\n"
    repeated = parse_text(once, "p.yaml").data["b"]
    assert len(repeated) == MAX_ALIAS_VALUES - 1
    # An alias of a value that itself holds aliases counts what it repeats, not more.
    nested = f"a: &a {big}\nb: &b [*a]\n"
    assert parse_text(nested, "p.yaml").data["b"] == [repeated]
    with pytest.raises(InvalidPipeline, match="repeat over 100000 values") as info:
        parse_text(once + "c: *a\n", "p.yaml")
    assert info.value.where == Location("p.yaml", 3, 1)


def test_a_real_apply_renders_values_as_written(tmp_path: Path) -> None:
    (tmp_path / "pipeline.yaml").write_text(
        "runner: 1\n"
        "name: typed\n"
        "steps:\n"
        "  on:\n"
        "    uses: template\n"
        "    with:\n"
        '      text: "country={{ country }} zip={{ zip }} t={{ t }} ok={{ ok }} d={{ d }}"\n'
        "      vars: {country: NO, zip: 010, t: 12:30, ok: yes, d: 2024-01-01}\n",
        encoding="utf-8",
    )
    proc = subprocess.run(
        [*runner_bin(), "apply", "pipeline.yaml", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    run_id = json.loads(proc.stdout)["run"]["id"]
    shown = subprocess.run(
        [*runner_bin(), "runs", "show", run_id, "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    (execution,) = json.loads(shown.stdout)["executions"]
    assert execution["step_id"] == "on"
    assert execution["output"]["text"] == "country=NO zip=10 t=12:30 ok=yes d=2024-01-01"


def test_a_pipeline_of_over_a_million_values_is_refused_before_it_is_built() -> None:
    text = "runner: 1\nsteps:\n  a:\n    with:\n      v: [" + "1," * MAX_VALUES + "1]\n"
    with pytest.raises(InvalidPipeline, match=f"holds over {MAX_VALUES} values") as info:
        parse_text(text, "big.yaml")
    assert info.value.where == Location("big.yaml", 5, 10)
    assert "uses: read" in (info.value.hint or "")
    # A data document may hold more (a file read at run time), up to its own bound.
    assert len(load_data("[" + "1," * MAX_VALUES + "1]", "data.yaml")) == MAX_VALUES + 1


def test_a_pipeline_file_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as f:
        f.write(b"runner: 1\nname: huge\nsteps: {}\n")
        f.truncate(MAX_FILE_BYTES + 1)  # sparse: nothing to read, only the size counts
    with pytest.raises(InvalidPipeline, match="MB, over the limit of 16 MB") as info:
        parse_file(path, "huge.yaml")
    assert info.value.where == Location("huge.yaml", 1, 1)


def document_digest(text: str) -> str | None:
    data = document_data(text)
    return None if data is None else data_digest(data)


def test_document_digest_is_of_the_values_read() -> None:
    base = document_digest("a: 1\nb: [x, y]\nc: |\n  # kept\n")
    assert base is not None
    assert document_digest("# top\na: 1   # one\nb:\n  - x\n  - y\nc: |\n  # kept\n") == base
    # styles and anchors that give the same values: the same document for the compiler
    assert document_digest('a: &n 1\nb: [\'x\', "y"]\nc: "# kept\\n"\n') == base
    # the block scalar's "# kept" is content, not a comment; a tag or quote that changes a
    # value's type changes it, and so does key order
    different = [
        "a: 1\nb: [x, y]\nc: |\n  # changed\n",
        "a: '1'\nb: [x, y]\nc: |\n  # kept\n",
        "a: !!str 1\nb: [x, y]\nc: |\n  # kept\n",
        "a: 1.0\nb: [x, y]\nc: |\n  # kept\n",
        "a: true\nb: [x, y]\nc: |\n  # kept\n",
        "b: [x, y]\na: 1\nc: |\n  # kept\n",
        "a: 1\nb: [x, y]\n'<<': |\n  # kept\n",
    ]
    for text in different:
        assert document_digest(text) not in (None, base), text
    assert document_digest("a: [1,\n") is None
