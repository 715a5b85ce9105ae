"""runner.source._fastyaml: the line reader answers only what the full reader would build.

Property: for any text, the line reader either declines (None) or returns exactly the value the
full reader (libyaml's node tree, core schema) builds, types and key order included, and then the
full reader raises nothing. Positions of a document read by the line reader are found later, by
the full reader, and equal the ones it would have recorded.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.errors import InvalidPipeline, Location
from runner.source import _fastyaml
from runner.source._fullyaml import parse_full
from runner.source.document import MAX_VALUES, parse_file, parse_text

REPO = Path(__file__).resolve().parent.parent.parent

PROPERTY = settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def same(a: Any, b: Any) -> bool:
    """Equal, with bool, int and float told apart and mapping key order kept."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def check(text: str) -> bool:
    """Assert the property for ``text``; True when the line reader answered."""
    fast = _fastyaml.read(text, MAX_VALUES)
    if fast is None:
        return False
    full = parse_full(text, "f.yaml", MAX_VALUES)  # raises if the line reader read a bad text
    assert same(fast[0], full.data), (text, fast[0], full.data)
    return True


KEYS = ["a", "b", "run", "a.b", "x-y", "p/q", "_k", "1", "true", "null", "NO", "<<", "x y", "é"]
VALUES = [
    "",
    "x",
    "a b",
    "a  b  ",
    "1",
    "-5",
    "+5",
    "010",
    "0o17",
    "0x1F",
    "1_000",
    "1.5",
    "-.5",
    "1.",
    "6.02E+23",
    "1e400",
    ".inf",
    "-.INF",
    ".nan",
    "true",
    "False",
    "TRUE",
    "yes",
    "NO",
    "on",
    "~",
    "null",
    "Null",
    "12:30",
    "2024-01-01",
    "=",
    "<<",
    "a#b",
    "a #b",
    "a:b",
    "a: b",
    "a:",
    ":x",
    "?x",
    "-x",
    "-",
    "- x",
    "? x",
    "%x",
    "@x",
    "`x",
    "&x a",
    "*x",
    "!!str 1",
    "!local x",
    "|",
    ">-",
    '"a"',
    '"a\\nb"',
    '"a\\"b"',
    '"a\\x41"',
    '"a\\/b"',
    '"a\\\\"',
    '"un',
    "'it''s'",
    "'a",
    '"a" # c',
    '"a"#c',
    "[]",
    "[a, b]",
    '["a", 1, true]',
    "[a,]",
    "[a, [b]]",
    "[ a , b ]",
    "[a b, c]",
    "[a:b]",
    "['x', \"y\"]",
    "[-1]",
    "[a] # c",
    "{}",
    "{a: 1}",
    "{ }",
    "{a: 1, b: [x, 'y'], c: {d: \"e\"}}",
    "{a: 1, a: 2}",
    "{a: b,}",
    "{a: b,, c: d}",
    "{a:b}",
    "{a: }",
    "{a}",
    "{1: x}",
    "{true: x}",
    "{x y: z}",
    "{a: b} # c",
    "{a: b}#c",
    "{a: [b}",
    "{a: b",
    "{? a: b}",
    "{a: !t b}",
    "{a: *x}",
    "{a: &x b}",
    "{a: -1}",
    "{a: b: c}",
    '{a: "b\\n"}',
    "{a: 'b' c}",
    "{a: ${{ x }}}",
    "[{a: b}, [c, []]]",
    "[[a], {}]",
    "[a, {b: c},]",
    "# c",
    "x # c",
    "${{ params.x }}",
    "echo {a,b} > out.txt",
    "é",
    "\t",
    "a\tb",
    "0",
    "-0",
    "00",
    "+.5",
    "0b101",
    "1:20:30",
    "x\r",
    "\ufeffx",
    "a\x85b",
    "a\u2028b",
]
INDENTS = ["", " ", "  ", "   ", "    ", "      "]


@st.composite
def yaml_like(draw: st.DrawFn) -> str:
    """Lines built from YAML's pieces: indents, dashes, keys, values and comments, mixed."""
    lines = []
    for _ in range(draw(st.integers(1, 12))):
        line = draw(st.sampled_from(INDENTS))
        if draw(st.booleans()):
            line += draw(st.sampled_from(["- ", "-", "-  ", "- - "]))
        if draw(st.integers(0, 3)):
            line += draw(st.sampled_from(KEYS)) + draw(st.sampled_from([":", ": ", ":  ", " :"]))
        line += draw(st.sampled_from(VALUES))
        if draw(st.integers(0, 9)) == 0:
            line = draw(st.sampled_from(["---", "...", "--- # c", "%YAML 1.2", "# c", ""]))
        lines.append(line)
    return "\n".join(lines) + draw(st.sampled_from(["", "\n", "\n\n"]))


SCALARS = [v for v in VALUES if v and v[0] not in "|>-?" and "\n" not in v]
SAFE_KEYS = KEYS[:5]
SAFE_SCALARS = [
    "x",
    "a b",
    "1",
    "-5",
    "0o17",
    "1.5",
    "true",
    "~",
    "=",
    "a#b",
    "a:b",
    '"a"',
    "'it''s'",
    "[a, b]",
    '["a", 1]',
    "[]",
    "{}",
    "{a: 1}",
    "{type: array, default: []}",
    '{prompt: "say ${{ item }}", n: [1, x], m: {}}',
    "{ a : b }",
    "{a: {b: [c, 'd''e']}}",
    "[{a: b}, [c]]",
    "x # c",
    "${{ params.x }}",
    "é",
]


@st.composite
def block_docs(draw: st.DrawFn) -> str:
    """Well-formed block documents in the styles pipelines are written in (indents of any
    width, sequences compact or indented, "- key:" mappings, flow lists, comments, blank lines),
    the scalars drawn from the tricky ones; sometimes one line is then damaged."""
    lines: list[str] = []

    def scalar() -> str:
        return draw(st.sampled_from(SCALARS if not draw(st.integers(0, 5)) else SAFE_SCALARS))

    def mapping(indent: int, depth: int, first_prefix: str = "") -> None:
        keys = draw(
            st.lists(
                st.sampled_from(KEYS if not draw(st.integers(0, 5)) else SAFE_KEYS),
                min_size=1,
                max_size=4,
                unique=True,
            )
        )
        step = draw(st.sampled_from([1, 2, 4]))
        for i, key in enumerate(keys):
            lead = first_prefix if i == 0 and first_prefix else " " * indent
            kind = draw(st.integers(0, 5)) if depth < 3 else 0
            if kind <= 2:
                lines.append(f"{lead}{key}: {scalar()}")
            elif kind == 3:
                lines.append(f"{lead}{key}:{draw(st.sampled_from(['', '  ', ' # c']))}")
                mapping(indent + step, depth + 1)
            else:
                lines.append(f"{lead}{key}:")
                sequence(indent + draw(st.sampled_from([0, step])), depth + 1)
            if draw(st.integers(0, 6)) == 0:
                lines.append(draw(st.sampled_from(["", "# c", " " * indent + "# c", "   "])))

    def sequence(indent: int, depth: int) -> None:
        for _ in range(draw(st.integers(1, 3))):
            dash = " " * indent + draw(st.sampled_from(["- ", "-  "]))
            kind = draw(st.integers(0, 4)) if depth < 3 else 0
            if kind <= 2:
                lines.append(dash + scalar())
            elif kind == 3:
                mapping(len(dash), depth + 1, first_prefix=dash)
            else:
                lines.append(dash.rstrip())
                mapping(indent + 2, depth + 1)

    if draw(st.booleans()):
        lines.append(draw(st.sampled_from(["---", "--- # c", "# head"])))
    if draw(st.integers(0, 4)):
        mapping(draw(st.sampled_from([0, 0, 1])), 0)
    else:
        sequence(0, 0)
    if draw(st.integers(0, 3)) == 0:
        i = draw(st.integers(0, len(lines) - 1))
        lines[i] = draw(st.sampled_from(INDENTS)) + draw(st.sampled_from(VALUES))
    return "\n".join(lines) + "\n"


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text("abc-_.1 :#", min_size=1, max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@PROPERTY
@given(yaml_like())
def test_line_reader_equals_the_full_reader_on_yaml_like_lines(text: str) -> None:
    check(text)


@PROPERTY
@given(block_docs())
def test_line_reader_equals_the_full_reader_on_block_documents(text: str) -> None:
    check(text)


@PROPERTY
@given(st.text(alphabet=" \n-:#[]{},\"'ab1.&*!|>~\\", max_size=60))
def test_line_reader_equals_the_full_reader_on_any_text(text: str) -> None:
    check(text)


@PROPERTY
@given(JSON, st.sampled_from([None, True]), st.sampled_from([1, 2, 4]))
def test_line_reader_equals_the_full_reader_on_dumped_data(
    data: Any, flow: bool | None, indent: int
) -> None:
    for text in (
        yaml.safe_dump(data, default_flow_style=flow, indent=indent, allow_unicode=True),
        yaml.safe_dump(data, default_flow_style=False, indent=indent, width=20),
        json.dumps(data, indent=indent),
    ):
        check(text)


def test_the_common_pipeline_shape_is_read_by_the_line_reader() -> None:
    text = (
        "# a pipeline\n---\nrunner: 1\nname: chain\nparams:\n  n: {}\n  size: 3  # comment\n"
        'steps:\n  s1:\n    uses: shell\n    with:\n      run: "cat src/in.txt > out/1.txt"\n'
        '      inputs: ["src/in.txt"]\n      outputs: [out/1.txt]\n    needs: []\n'
        "  s2:\n    uses: template\n    check:\n    - ${{ output.text | length > 0 }}\n"
        "    - name: x\n      when: 'it''s'\n    for_each:\n      - 1\n      - -2.5\n"
        "      -\n        nested: true\n"
    )
    assert check(text)
    src = parse_text(text, "p.yaml")
    assert src.text is not None  # positions not read yet
    assert src.data["steps"]["s2"]["check"][1] == {"name": "x", "when": "it's"}
    assert src.data["steps"]["s2"]["for_each"] == [1, -2.5, {"nested": True}]


@pytest.mark.parametrize(
    "path",
    sorted(
        p
        for p in REPO.glob("**/*.yaml")
        if ".venv" not in p.parts and "node_modules" not in p.parts
    ),
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_every_yaml_file_of_the_repository_reads_the_same(path: Path) -> None:
    """Both readers agree on every shipped pipeline, example and bad input, and positions found
    later are the ones the full reader records."""
    text = path.read_bytes().decode("utf-8", "replace")  # not_utf8.yaml: never read as text
    try:
        full = parse_full(text, "f.yaml", MAX_VALUES)
    except InvalidPipeline:
        assert _fastyaml.read(text, MAX_VALUES) is None
        return
    if not check(text):
        return
    src = parse_text(text, "f.yaml")
    for table, key in ((full.values, False), (full.keys, True)):
        for p, (line, column) in table.items():
            assert src.where(p, key=key) == Location("f.yaml", line, column)
    assert src.text is None  # read once, then kept


def test_a_position_is_read_only_when_shown(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("runner: 1\nname: x\nsteps:\n  a:\n    uses: shell\n    with: {}\n")
    src = parse_file(path, "p.yaml")
    where = src.where(("steps", "a", "uses"))
    assert src.text is not None
    assert str(where) == "p.yaml:5:11"
    assert src.text is None
    assert where == Location("p.yaml", 5, 11) and Location("p.yaml", 5, 11) == where
    assert hash(where) == hash(Location("p.yaml", 5, 11))
    assert src.where(("steps", "a", "nope"), key=True) == Location("p.yaml", 4, 3)
    import copy
    import pickle

    assert type(pickle.loads(pickle.dumps(where))) is Location
    assert type(copy.deepcopy(where)) is Location


def test_a_pipeline_the_line_reader_reads_needs_no_libyaml(tmp_path: Path) -> None:
    """`runner validate` of a valid pipeline in the common shape never imports yaml (its import
    is a noticeable part of a small validate); a position asked for brings it in."""
    path = tmp_path / "p.yaml"
    path.write_text("runner: 1\nname: x\nsteps:\n  a:\n    uses: shell\n    with:\n      run: x\n")
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from runner.pipeline.compiler import compile_pipeline\n"
        f"plan = compile_pipeline(Path({str(path)!r}))\n"
        "assert 'yaml' not in sys.modules, 'yaml imported'\n"
        "print(plan.steps['a'].where)\n"
        "assert 'yaml' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{path}:4:3"


@pytest.mark.parametrize(
    "text",
    [
        "a: {x: [1, 2], y: {z: [[3], {}]}}\nb: [c, {d: e}]\n",
        "- {a: 1, b: [2, 3]}\n- [[4, 5], [6]]\n",
        "k: [a, b, c]\nm: {n: o}\n",
    ],
)
def test_flow_collections_count_values_as_the_full_reader_does(text: str) -> None:
    """Near the document's bound of values, the line reader declines exactly where the full
    reader refuses: it counts a flow collection's pairs and items as the full reader does."""
    accepted_from = None
    for bound in range(1, 20):
        try:
            parse_full(text, "f.yaml", bound)
        except InvalidPipeline:
            assert _fastyaml.read(text, bound) is None, bound
            continue
        accepted_from = accepted_from or bound
        assert _fastyaml.read(text, bound) is not None, bound
    assert accepted_from is not None
