"""runner.source.tomlfile.loads_toml: runner.toml's plain form read without tomllib gives
tomllib's tables exactly; anything else is tomllib's answer (its tables or its error)."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.source.tomlfile import _plain_toml, loads_toml


def _outcome(read: Any, text: str) -> tuple[str, Any]:
    try:
        return "tables", read(text)
    except tomllib.TOMLDecodeError as exc:
        return "error", str(exc)


KEYS = ["a", "b", "default_provider", "base-url", "x_1", "true", "1234", "é", '"q"', "a.b", ""]
VALUES = [
    '"openai"',
    '"http://127.0.0.1:8080/v1"',
    '""',
    "'lit\\eral'",
    "''",
    '"tab\there"',
    '"with # hash"',
    '"ünïcode ☃"',
    '"esc\\n"',
    '"""multi"""',
    "0",
    "16",
    "-3",
    "+7",
    "01",
    "1_000",
    "1e3",
    "1.5",
    "0x1f",
    "inf",
    "true",
    "false",
    "True",
    "1979-05-27",
    "[1, 2]",
    "{ a = 1 }",
    '"unterminated',
    "",
]
HEADERS = ["general", "providers", "providers.openai", "prices.openai", "a.b.c", "a", "x y", ""]


def _line() -> st.SearchStrategy[str]:
    pad = st.sampled_from(["", " ", "\t", "  "])
    comment = st.sampled_from(["", " # note", "#c", " #", " # ☃ \t"])
    pair = st.tuples(pad, st.sampled_from(KEYS), st.sampled_from([" = ", "=", " =\t", " : "]))
    pair_line = st.tuples(pair, st.sampled_from(VALUES), comment).map(
        lambda t: f"{t[0][0]}{t[0][1]}{t[0][2]}{t[1]}{t[2]}"
    )
    brackets = st.sampled_from([("[", "]"), ("[[", "]]"), ("[ ", " ]")])
    header_line = st.tuples(pad, brackets, st.sampled_from(HEADERS), comment).map(
        lambda t: f"{t[0]}{t[1][0]}{t[2]}{t[1][1]}{t[3]}"
    )
    odd = st.sampled_from(["", "   ", "# a comment", "a = 1\r", "\ufeffa = 1", "b = \x01", "=1"])
    return st.one_of(pair_line, header_line, odd)


def _plain_line() -> st.SearchStrategy[str]:
    """Mostly the plain form: the same tables declared twice, keys repeated, odd values now
    and then (a document of them is read here often, not only by tomllib)."""
    pair = st.tuples(
        st.sampled_from(["", "  "]),
        st.sampled_from(KEYS[:7]),
        st.sampled_from(VALUES[:4] + VALUES[10:13] + VALUES[20:22] + VALUES[-4:]),
        st.sampled_from(["", " # c"]),
    ).map(lambda t: f"{t[0]}{t[1]} = {t[2]}{t[3]}")
    header = st.sampled_from(HEADERS[:6]).map(lambda h: f"[{h}]")
    return st.one_of(pair, pair, pair, header, st.just(""))


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.one_of(_line(), _plain_line(), _plain_line()), max_size=8), st.booleans())
def test_the_plain_reading_is_tomllibs(lines: list[str], final_newline: bool) -> None:
    text = "\n".join(lines) + ("\n" if final_newline else "")
    expected = _outcome(tomllib.loads, text)
    plain = _plain_toml(text)
    if plain is not None:  # read here: only a document tomllib reads, to the same tables
        assert expected == ("tables", plain), text
    assert _outcome(loads_toml, text) == expected


RUNNER_TOMLS = [
    "",
    "# marks the project root\n",
    '[general]\ndefault_provider = "fake"\n',
    '[general]\ndefault_provider = "openai"\n[providers.openai]\n'
    'base_url = "http://127.0.0.1:8080/v1"\nmax_concurrency = 16\n',
    "[budget]\nmax_cost = 5\n\n[prices.openai]\ninput_per_1k = 1  # per thousand\n",
    "[providers]\n[providers.a]\nx = true\n[providers.b]\ny = 'z'\n",
]


@pytest.mark.parametrize("text", RUNNER_TOMLS)
def test_runner_tomls_as_written_are_read_without_tomllib(text: str) -> None:
    assert _plain_toml(text) == tomllib.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        "[a]\n[a]\n",  # declared twice: tomllib's error
        "[a.b]\n[a]\nc = 1\n",  # a super-table after its sub-table: tomllib reads it
        "a = 1\na = 2\n",
        "a = 1\n[a]\n",
        "[a]\nb = 1\n[a.b]\n",
        'a = "x\\ty"\n',
        "a = 1979-05-27\n",
        "a = 1\r\n",
    ],
)
def test_other_forms_are_tomllibs(text: str) -> None:
    assert _plain_toml(text) is None
    assert _outcome(loads_toml, text) == _outcome(tomllib.loads, text)
