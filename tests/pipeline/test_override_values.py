"""Any `-p` (and `iterate --var`) value, whatever it holds, either arrives byte for byte or is a
clear usage error (exit 2, the param's declaration located): never a traceback, never a value
that silently keeps the quotes the user typed around it.

The class: JSON's surrogate-pair escapes (what json.dumps writes for an emoji), lone surrogate
escapes, characters YAML refuses raw or folds (DEL, ESC, C1, tab, newline, U+2028, BOM) inside
double or single quotes, and bytes that are not UTF-8. A property test reads every text through
the -p reader both as json.dumps writes it (ASCII and not) and as typed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.errors import InvalidPipeline
from runner.pipeline.loader import read_override

PIPELINE = """\
runner: 1
name: q
params:
  title: {type: string, default: t}
steps:
  say: {uses: template, with: {text: "{{ t }}", vars: {t: "${{ params.title }}"}}}
"""


def _apply(root: Path, value: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    return subprocess.run(
        [sys.executable, "-m", "runner", "apply", "p.yaml", "-q", "--json", "-p", f"title={value}"],
        cwd=root,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )


def _said(root: Path, run_id: str) -> str:
    shown = subprocess.run(
        [sys.executable, "-m", "runner", "runs", "show", run_id, "--json"],
        cwd=root,
        capture_output=True,
        timeout=120,
        check=True,
    )
    text: str = json.loads(shown.stdout)["executions"][0]["output"]["text"]
    return text


ARRIVES = [
    ('"\\ud83c\\udfac"', "\U0001f3ac"),  # the case: crashed create_run, then kept quotes
    ('"\\uD83C\\uDFAC and \\u00e9"', "\U0001f3ac and \u00e9"),
    ('"a\x7fb"', "a\x7fb"),  # a raw DEL kept the quotes around it
    ('"esc \x1b]0;t\x07 c1 \x9b"', "esc \x1b]0;t\x07 c1 \x9b"),
    ('"line\none\ttab"', "line\none\ttab"),  # YAML would fold the newline to a space
    ('"sep\u2028bom\ufeff"', "sep\u2028bom\ufeff"),
    ("'single ''quoted''\nwith\x7fDEL'", "single 'quoted'\nwith\x7fDEL"),
    ('"Hello" world', '"Hello" world'),  # not one quoted scalar: the text as typed
    ("a\x7fb", "a\x7fb"),
]


@pytest.mark.parametrize(("typed", "value"), ARRIVES, ids=[repr(a)[:24] for a, _ in ARRIVES])
def test_a_value_arrives_byte_for_byte_through_a_real_apply(
    tmp_path: Path, typed: str, value: str
) -> None:
    (tmp_path / "runner.toml").write_text("")
    (tmp_path / "p.yaml").write_text(PIPELINE)
    done = _apply(tmp_path, typed)
    assert done.returncode == 0, done.stderr.decode()
    assert _said(tmp_path, json.loads(done.stdout)["run"]["id"]) == value


REFUSED = [
    ('"\\ud800"', "the quoted value is not valid YAML (found invalid Unicode character escape"),
    ('"\\udfac\\ud83c"', "the quoted value is not valid YAML"),  # a pair in the wrong order
    ('"\\\\ud83c\\udfac"', "the quoted value is not valid YAML"),  # the first \ is escaped
    ("'it's'", "the quoted value is not valid YAML"),
    ('"open', None),  # not one quoted scalar: the text as typed (no error)
    (os.fsdecode(b"\xff\xfe"), "not UTF-8 text (byte 0xff at offset 0)"),
]


@pytest.mark.parametrize(("typed", "says"), REFUSED, ids=[repr(a)[:24] for a, _ in REFUSED])
def test_a_value_that_cannot_arrive_is_a_usage_error(
    tmp_path: Path, typed: str, says: str | None
) -> None:
    (tmp_path / "runner.toml").write_text("")
    (tmp_path / "p.yaml").write_text(PIPELINE)
    done = _apply(tmp_path, typed)
    err = done.stderr.decode("utf-8", "replace")
    assert b"Traceback" not in done.stderr and "bug" not in err
    if says is None:
        assert (
            done.returncode == 0 and _said(tmp_path, json.loads(done.stdout)["run"]["id"]) == typed
        )
        return
    assert done.returncode == 2, err
    assert says in err and "p.yaml:4:3: param 'title'" in err, err
    assert json.loads(done.stdout)["exit_code"] == 2


_TEXT = st.text(st.characters(codec="utf-8"), max_size=40)  # no lone surrogates: any text


@settings(max_examples=400, deadline=None)
@given(_TEXT)
def test_json_written_values_read_back_exactly(value: str) -> None:
    """What json.dumps writes (ASCII, with surrogate-pair escapes, or not) is read as JSON reads
    it: exactly the value."""
    assert read_override("t", json.dumps(value), "string") == value
    assert read_override("t", json.dumps(value, ensure_ascii=False), "string") == value


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_any_json_value_json_dumps_wrote_reads_back_exactly(value: object) -> None:
    """`runner resume` hands a run's params back as json.dumps wrote them: an object or list
    param holding an emoji, DEL or ESC must come back equal (its cache keys depend on it)."""
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        got = read_override("t", text, "any")
        assert got == value and type(got) is type(value)


# Any code point (lone surrogates too), weighted towards what the reader treats specially.
_HOSTILE = st.one_of(
    st.characters(exclude_categories=()),
    st.sampled_from(
        ['"', "'", "\\", "\\ud83c", "\\udfac", "\ud800", "\udcff", "\x7f", "\n", ":", "#"]
    ),
)


@settings(max_examples=600, deadline=None)
@given(st.lists(_HOSTILE, max_size=30).map("".join))
def test_any_typed_text_is_a_string_or_a_clear_error(raw: str) -> None:
    try:
        value = read_override("t", raw, "string")
    except InvalidPipeline as exc:  # (the CLI adds the param's location and exits 2)
        assert exc.message
        return
    assert isinstance(value, str)
    value.encode("utf-8")  # journal, JSON and terminal can carry it


GATED = """\
runner: 1
name: gated
params:
  opts: {type: object, default: {}}
steps:
  say: {uses: template, with: {text: "{{ o.t }}", vars: {o: "${{ params.opts }}"}}}
  review: {uses: human_gate, needs: [say], with: {summary: "ok?"}}
  after: {uses: template, needs: [review], with: {text: "done"}}
"""


def test_resume_gets_back_the_params_a_run_was_given(tmp_path: Path) -> None:
    """A run suspended at a gate resumes with exactly its params: an object holding an emoji,
    DEL and ESC (resume read them as YAML, which refuses JSON's surrogate pairs: the run could
    not go on)."""
    (tmp_path / "runner.toml").write_text("")
    (tmp_path / "p.yaml").write_text(GATED)
    opts = {"t": "\U0001f3ac\x7f\x1b]0;x\x07 \u00e9"}
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}

    def runner(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "runner", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )

    first = runner("apply", "p.yaml", "--json", "-q", "-p", f"opts={json.dumps(opts)}")
    assert first.returncode == 7, first.stderr.decode()
    run_id = json.loads(first.stdout)["run"]["id"]
    decided = runner("decide", run_id, "review", "approve", "--json", "-q")
    assert decided.returncode == 0, decided.stderr.decode()
    steps = {s["id"]: s["status"] for s in json.loads(decided.stdout)["steps"]}
    assert steps == {"say": "cached", "review": "ran", "after": "ran"}, steps
    assert _said(tmp_path, run_id) == opts["t"]
