"""Rules: every named check (pass and fail, exact reasons), composition, compile errors."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from runner.errors import ExpressionError, Location, RuleError
from runner.expr import Reference
from runner.expr.rules import Rule, RuleBook, Verdict, compile_rule, rule_schema_text

REPO = Path(__file__).resolve().parent.parent.parent
PATTERNS = {"close_framing": r"(?i)\bsee you next time\b", "shouty": r"^[A-Z ]+$"}
NAMED: dict[str, Any] = {
    "label_ok": {"choice_in": {"value": "${{ output.label }}", "choices": ["cat", "dog"]}},
    "has_text": "${{ output.text|length > 0 }}",
}


def where_of(path: tuple[Any, ...]) -> Location:
    # A stand-in for the loader's locator: the path itself, visible in the location.
    return Location("pipe.yaml", 10 + len(path), 1 + len(path))


def rule(raw: Any, root: Path | None = None, **kw: Any) -> Rule:
    args: dict[str, Any] = {
        "where_of": where_of,
        "patterns": PATTERNS,
        "named": NAMED,
        "root": root or Path.cwd(),
    }
    args.update(kw)
    return compile_rule(raw, **args)


def verdict(raw: Any, context: Mapping[str, Any], root: Path | None = None) -> Verdict:
    root = root or Path.cwd()
    compiled = rule(raw, root)
    result = asyncio.run(compiled.evaluate(context, root=root))
    if compiled.sync:  # the sync fast path must agree with the async one
        assert compiled.evaluate_sync(context, root=root) == result
    return result


def fails(raw: Any, context: Mapping[str, Any], root: Path | None = None) -> list[str]:
    result = verdict(raw, context, root)
    assert not result.passed
    return result.reasons


OUT = {"output": {"label": "cow", "text": "hello", "n": 3}}


# -- expr ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "${{ output.n > 2 }}",
        "output.n > 2",
        {"expr": "output.n > 2"},
        "  ${{ output.n > 2 }}  ",
        True,
    ],
)
def test_expression_forms_pass(raw: Any) -> None:
    assert verdict(raw, OUT) == Verdict(True, [])


def test_expression_fails_with_what_it_found() -> None:
    # a comparison shows what it measured, not only False (issue 42)
    assert fails("${{ output.n > 5 }}", OUT) == [
        "expr: expected `output.n > 5` to be true: `output.n` is 3, wanted > 5"
    ]
    assert fails("output.text|length < 2", OUT) == [
        "expr: expected `output.text|length < 2` to be true: `output.text|length` is 5, wanted < 2"
    ]
    assert fails(False, OUT) == ["the rule is `false`"]


@pytest.mark.parametrize(
    ("raw", "reading"),
    [
        ("output.text | trim | length > 10", "`output.text | trim | length` is 5, wanted > 10"),
        ("output.label == 'cat'", "`output.label` is 'cow', wanted == 'cat'"),
        (
            "output.label not in ['cow', 'pig']",
            "`output.label` is 'cow', wanted not in ['cow', 'pig']",
        ),
        ("'o' in output.label ~ 'x' and false", None),  # `and` at the top: no one reading
        (
            "output.n < output.text | length - 3",
            "`output.n` is 3, wanted < `output.text | length - 3` (2)",
        ),
        ("(output.n > 1) == false", "`(output.n > 1)` is True, wanted == false"),
        (
            "output.n >= output.label | length + 1",
            "`output.n` is 3, wanted >= `output.label | length + 1` (4)",
        ),
        ("output.n > -1 * 9 + 20", "`output.n` is 3, wanted > -1 * 9 + 20"),
        ("1 < output.n < 2", None),  # a chain
        ("not output.n > 1", None),
        ("output.n > 1 if false else false", None),
        ("output.n - 3", None),
        ("output.n is odd and false", None),
    ],
)
def test_a_failed_comparison_shows_its_measured_side(raw: str, reading: str | None) -> None:
    (reason,) = fails(raw, OUT)
    if reading is None:
        assert reason.startswith(f"expr: expected `{raw}` to be true, found "), reason
    else:
        assert reason == f"expr: expected `{raw}` to be true: {reading}"


def test_a_side_that_cannot_be_read_leaves_the_plain_message() -> None:
    from runner.expr.checks._measured import measured

    assert measured("output.missing > 1", OUT) is None  # the side is undefined
    assert measured("output.n > 'a' ~", OUT) is None  # not an expression


def test_expression_error_is_a_failed_verdict_marked_error() -> None:
    result = verdict("output.missing.deeper", OUT)
    assert result == Verdict(
        False,
        ["expr: in 'output.missing.deeper': 'dict object' has no attribute 'missing'"],
        error=True,
    )


def test_message_replaces_the_reason_and_may_use_expressions() -> None:
    raw = {"expr": "output.n > 5", "message": "need more than 5, got ${{ output.n }}"}
    assert fails(raw, OUT) == ["need more than 5, got 3"]
    raw2 = {"choice_in": {"value": "${{ output.label }}", "choices": ["a"]}, "message": "bad"}
    assert fails(raw2, OUT) == ["bad"]


# -- choice_in -------------------------------------------------------------------------------------


def test_choice_in() -> None:
    raw = {"choice_in": {"value": "${{ output.label }}", "choices": ["cat", "dog"]}}
    assert verdict(raw, {"output": {"label": "dog"}}).passed
    assert fails(raw, OUT) == ["choice_in: expected one of ['cat', 'dog'], found 'cow'"]


def test_choice_in_from_an_expression_and_types_matter() -> None:
    raw = {"choice_in": {"value": "${{ output.n }}", "choices": "${{ params.allowed }}"}}
    assert verdict(raw, {**OUT, "params": {"allowed": [1, 2, 3]}}).passed
    assert verdict(raw, {**OUT, "params": {"allowed": [3.0]}}).passed
    assert fails(raw, {**OUT, "params": {"allowed": ["3"]}}) == [
        "choice_in: expected one of ['3'], found 3"
    ]
    assert fails(raw, {"output": {"n": True}, "params": {"allowed": [1]}}) == [
        "choice_in: expected one of [1], found True"
    ]
    broken = verdict(raw, {**OUT, "params": {"allowed": 7}})
    assert broken == Verdict(
        False, ["choice_in: expected the choices to be a list, found 7"], error=True
    )


# -- matches ---------------------------------------------------------------------------------------


def test_matches_inline_and_named_patterns() -> None:
    inline = {"matches": {"value": "${{ output.text }}", "pattern": "^hel+o$"}}
    assert verdict(inline, OUT).passed
    assert fails(inline, {"output": {"text": "help"}}) == [
        "matches: expected text matching /^hel+o$/, found 'help'"
    ]
    named = {"matches": {"value": "${{ output.text }}", "pattern_name": "close_framing"}}
    assert verdict(named, {"output": {"text": "Bye. See you next time!"}}).passed
    assert fails(named, OUT) == [
        "matches: expected text matching pattern 'close_framing' "
        "/(?i)\\bsee you next time\\b/, found 'hello'"
    ]
    assert fails(named, {"output": {"text": 42}}) == [
        "matches: expected text matching pattern 'close_framing' "
        "/(?i)\\bsee you next time\\b/, found int 42"
    ]


# -- file_nonempty ---------------------------------------------------------------------------------


def test_file_nonempty(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "full.txt").write_text("x")
    (tmp_path / "out" / "empty.txt").write_text("")
    raw = {"file_nonempty": "out/${{ name }}"}
    assert verdict(raw, {"name": "full.txt"}, tmp_path).passed
    expected = "file_nonempty: expected a non-empty file at "
    assert fails(raw, {"name": "empty.txt"}, tmp_path) == [
        expected + "'out/empty.txt', found an empty file"
    ]
    assert fails(raw, {"name": "none.txt"}, tmp_path) == [
        expected + "'out/none.txt', found no file"
    ]
    assert fails({"file_nonempty": "out"}, {}, tmp_path) == [expected + "'out', found a directory"]


def test_file_nonempty_never_leaves_the_root(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("x")
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(tmp_path / "secret")
    result = verdict({"file_nonempty": "${{ p }}"}, {"p": "../secret"}, root)
    assert result.error and not result.passed
    assert result.reasons == [
        f"file_nonempty: path '../secret' escapes the pipeline root {root.resolve()}"
    ]
    link = verdict({"file_nonempty": "${{ p }}"}, {"p": "link"}, root)
    assert link.error and "escapes the pipeline root" in link.reasons[0]
    with pytest.raises(RuleError, match="'link' escapes the pipeline root"):
        rule({"file_nonempty": "link"}, root)
    with pytest.raises(RuleError, match="is absolute"):
        rule({"file_nonempty": "/etc/passwd"}, root)


# -- json_schema -----------------------------------------------------------------------------------

LABEL_SCHEMA = {
    "type": "object",
    "required": ["label"],
    "properties": {"label": {"enum": ["cat", "dog"]}, "score": {"type": "number"}},
}


def test_json_schema_inline() -> None:
    raw = {"json_schema": {"value": "${{ output }}", "schema": LABEL_SCHEMA}}
    assert verdict(raw, {"output": {"label": "cat"}}).passed
    assert fails(raw, {"output": {"label": "cow", "score": "high"}}) == [
        "json_schema: expected a value valid against the schema, found 2 errors: "
        "at $.label: 'cow' is not one of ['cat', 'dog']; at $.score: 'high' is not of type "
        "'number'"
    ]


def test_json_schema_from_a_file_parsing_json_text(tmp_path: Path) -> None:
    (tmp_path / "label.schema.json").write_text(json.dumps(LABEL_SCHEMA))
    raw = {
        "json_schema": {"value": "${{ reply }}", "schema_file": "label.schema.json", "parse": True}
    }
    assert verdict(raw, {"reply": '{"label": "dog"}'}, tmp_path).passed
    assert fails(raw, {"reply": "{}"}, tmp_path) == [
        "json_schema: expected a value valid against the schema, found 1 error: "
        "at $: 'label' is a required property"
    ]
    assert fails(raw, {"reply": "sure! {"}, tmp_path) == [
        "json_schema: expected JSON text, found invalid JSON: Expecting value at line 1 column 1"
    ]


def test_json_schema_compile_errors(tmp_path: Path) -> None:
    with pytest.raises(RuleError, match="invalid schema: 'strin' is not valid"):
        rule({"json_schema": {"value": 1, "schema": {"type": "strin"}}}, tmp_path)
    with pytest.raises(RuleError, match=r"cannot read schema file 'missing\.json'"):
        rule({"json_schema": {"value": 1, "schema_file": "missing.json"}}, tmp_path)


# -- fail, collection_has --------------------------------------------------------------------------


def test_fail_always_fails_with_its_message() -> None:
    assert fails({"fail": "stopped: label ${{ output.label }}"}, OUT) == ["stopped: label cow"]


def test_collection_has_without_a_backend_is_an_error_verdict() -> None:
    from runner.expr.checks.collection_has import collection_backend, set_collection_backend

    installed = collection_backend()  # the collections module installs one when imported
    set_collection_backend(None)
    try:
        result = verdict(
            {"collection_has": {"collection": "docs", "id": "${{ output.label }}"}}, OUT
        )
    finally:
        set_collection_backend(installed)
    assert result == Verdict(
        False,
        ["collection_has: no collection backend is installed (the ingest module provides it)"],
        error=True,
    )


def test_collection_has_asks_the_installed_backend() -> None:
    from runner.expr.checks import CollectionQuery, set_collection_backend

    asked: list[CollectionQuery] = []

    async def backend(query: CollectionQuery) -> Verdict:
        asked.append(query)
        return Verdict(query.ids == ("cow",), [] if query.ids == ("cow",) else ["missing"])

    from runner.expr.checks.collection_has import collection_backend

    installed = collection_backend()
    set_collection_backend(backend)
    try:
        raw = {"collection_has": {"collection": "docs", "id": "${{ output.label }}"}}
        assert verdict(raw, OUT).passed
        assert asked[0].collection == "docs" and asked[0].min_count == 1
    finally:
        set_collection_backend(installed)


# -- composition -----------------------------------------------------------------------------------


def test_all_stops_at_the_first_failure_and_reports_it() -> None:
    raw = {"all": ["output.n > 1", "output.n > 5", {"fail": "never reached"}]}
    assert fails(raw, OUT) == [
        "expr: expected `output.n > 5` to be true: `output.n` is 3, wanted > 5"
    ]
    assert verdict({"all": ["output.n > 1", "true"]}, OUT).passed
    assert fails(["output.n > 1", {"fail": "list is all"}], OUT) == ["list is all"]


def test_any_reports_every_alternative() -> None:
    raw = {
        "any": [
            {"rule": "label_ok"},
            {"matches": {"value": "${{ output.text }}", "pattern_name": "shouty"}},
        ]
    }
    assert fails(raw, OUT) == [
        "any: none of 2 alternatives passed (rule 'label_ok': choice_in: expected one of "
        "['cat', 'dog'], found 'cow'; matches: expected text matching pattern 'shouty' "
        "/^[A-Z ]+$/, found 'hello')"
    ]
    assert verdict({"any": ["false", "output.n == 3"]}, OUT).passed


def test_not_inverts_but_never_turns_an_error_into_a_pass() -> None:
    assert verdict({"not": "output.n > 5"}, OUT).passed
    assert fails({"not": "output.n == 3"}, OUT) == [
        "not: expected this to fail, but it passed: `output.n == 3`"
    ]
    errored = verdict({"not": "output.nope.deeper"}, OUT)
    assert not errored.passed and errored.error


def test_named_rules_are_prefixed_and_shared() -> None:
    assert verdict({"rule": "has_text"}, OUT).passed
    assert fails({"rule": "label_ok"}, OUT) == [
        "rule 'label_ok': choice_in: expected one of ['cat', 'dog'], found 'cow'"
    ]


# -- refs, sync ------------------------------------------------------------------------------------


def test_refs_cover_every_expression_including_named_rules_and_messages() -> None:
    compiled = rule(
        {
            "all": [
                {"rule": "label_ok"},
                {"expr": "steps.a.output.ok", "message": "${{ params.why }}"},
                {"exec": {"run": "test -s ${{ steps.b.output.path }}"}},
            ]
        }
    )
    assert compiled.refs == {
        Reference("output", "label"),
        Reference("steps", "a"),
        Reference("params", "why"),
        Reference("steps", "b"),
    }
    assert compiled.rules_used == {"label_ok"}
    assert not compiled.sync  # exec needs the event loop
    assert rule("steps.a.output.ok").sync


def test_evaluate_sync_refuses_a_rule_that_needs_awaiting() -> None:
    compiled = rule({"exec": {"run": "true"}})
    with pytest.raises(TypeError, match=r"must be evaluated with `await rule\.evaluate"):
        compiled.evaluate_sync({}, root=Path.cwd())


# -- compile errors --------------------------------------------------------------------------------


def error(raw: Any, **kw: Any) -> RuleError | ExpressionError:
    with pytest.raises((RuleError, ExpressionError)) as info:
        rule(raw, **kw)
    assert isinstance(info.value, (RuleError, ExpressionError))
    return info.value


def test_unknown_check_is_located_with_a_suggestion() -> None:
    exc = error({"choise_in": {"value": 1, "choices": [1]}}, path=("steps", "s", "check"))
    assert isinstance(exc, RuleError)
    assert str(exc).splitlines()[0] == (
        "pipe.yaml:14:5: unknown check 'choise_in' (did you mean 'choice_in'?)"
    )


def test_unknown_pattern_rule_and_bad_regex_are_located() -> None:
    exc = error({"matches": {"value": "x", "pattern_name": "close_frame"}}, path=("w",))
    assert exc.message == "unknown pattern 'close_frame' (did you mean 'close_framing'?)"
    assert exc.where == Location("pipe.yaml", 13, 4)
    exc = error({"rule": "label_okay"})
    assert exc.message == "unknown rule 'label_okay' (did you mean 'label_ok'?)"
    exc = error({"matches": {"value": "x", "pattern": "(unclosed"}})
    assert exc.message == (
        "invalid regular expression '(unclosed': missing ), unterminated subpattern at position 0"
    )
    assert exc.where == Location("pipe.yaml", 12, 3)


def test_malformed_rules() -> None:
    assert error({"all": ["x"], "any": ["y"]}).message == (
        "a rule mapping holds exactly one check, found 'all' and 'any'"
    )
    assert error({"choice_in": {"value": 1}}).message == (
        "choice_in: 'choices' is a required property"
    )
    assert error(
        {"matches": {"value": 1, "pattern": "a", "pattern_name": "shouty"}}
    ).message.startswith("matches: ")
    assert error("hello ${{ x }}").message.startswith("a rule string must be one expression")
    assert error(42).message == "a rule is an expression string, a list or a mapping, found 42"
    assert error("1 +").message.startswith("invalid expression '1 +'")
    assert error({"exec": {"run": "true", "timout": 3}}).message == (
        "exec: Additional properties are not allowed ('timout' was unexpected)"
    )


def test_named_rule_cycles_and_errors_point_at_the_named_rule() -> None:
    named = {"a": {"rule": "b"}, "b": {"any": [{"rule": "a"}]}}
    exc = error({"rule": "a"}, named=named)
    assert exc.message == "rule 'a' refers to itself: a -> b -> a"
    exc = error({"rule": "bad"}, named={"bad": {"nope": 1}})
    assert exc.where == Location("pipe.yaml", 13, 4)  # ("rules", "bad", "nope")


def test_rulebook_compiles_patterns_and_named_rules_once_and_up_front() -> None:
    with pytest.raises(RuleError, match="invalid regular expression"):
        RuleBook(where_of, {"bad": "("}, {}, Path.cwd())
    with pytest.raises(RuleError, match="unknown check"):
        RuleBook(where_of, {}, {"unused": {"nope": 1}}, Path.cwd())
    book = RuleBook(where_of, PATTERNS, NAMED, Path.cwd())
    entry = book.add_step("s", when="params.go", check=[{"rule": "label_ok"}, "true"])
    assert entry.when is not None and len(entry.checks) == 2
    assert entry.checks[0].children()[0] is book.named_rules["label_ok"]


def test_the_schema_file_is_generated_from_the_registered_checks() -> None:
    assert (REPO / "schemas" / "rules.schema.json").read_text() == rule_schema_text()
