"""Differential fuzzing of shell commands with ``${{ }}`` values against real shells.

A value never enters the script text (runner/expr/shellenv.py): it reaches the command as an
environment variable the script expands, quoted for where it stands as runner/expr/_shellscan.py
learns it. What is proved here, under bash and dash (/bin/sh on Debian), with hostile values
whose payloads ``touch`` a PWNED file:

1. For every command the scanner accepts, the script run with a hostile value prints (``printf
   '%s\\0'`` into a file) what it printed with a plain one, the plain value replaced by the
   hostile one byte for byte, and no file appears: the value is one piece of data.
2. Whatever the scanner says, no value runs as code in the command text itself: the test builds
   the script with every reference written for a place drawn at random (as a scanner mistake
   would write it) and no PWNED marker appears. A wrong place can print the wrong text (a
   reference kept literal inside '...', or expanded unquoted and split into words), never parse
   a value. The claim is the shell runner starts: commands that hand an expanded value to
   something that runs text -- ``eval``, ``sh -c "$x"``, ``| sh``, bash arithmetic on it,
   ``${x@P}`` -- are the user's program reading data as code; the scanner refuses the ones it
   knows (tested as such), and bounding the rest is the sandbox's job. Those constructs are kept
   out of claim 2's corpus (``EVALUATES``).

A command the scanner refuses is fine for claim 1: refusing is its answer for what it cannot
prove. CI runs a bounded number of examples; RUNNER_FUZZ=soak runs many more (locally). Every
failure found becomes a plain case in test_shell_regressions.py or test_shell_forms.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.errors import ExpressionError
from runner.expr import compile_value
from runner.expr.shellenv import Script, reference, script_command
from runner.expr.shellquote import Place, Unquotable

SHELLS = [s for s in (shutil.which("bash"), shutil.which("dash"), "/bin/sh") if s]
SOAK = os.environ.get("RUNNER_FUZZ") == "soak"
V = "${{ v }}"
PLAIN = "PlainValue42"

HOSTILE = [
    "a; touch PWNED_1",
    "a'b\"c$(touch PWNED_2)",
    "`touch PWNED_3`",
    "x\ntouch PWNED_4\n",
    "';touch PWNED_5;'",
    '";touch PWNED_6;"',
    "$(touch PWNED_7)",
    ")touch PWNED_8;(",
    ";; esac; touch PWNED_9; case x in x)",
    "a) touch PWNED_10;; esac #",
    "\\'; touch PWNED_11 #",
    "*?[]{}~#!&|<>\\ \t",
    "esac",
    "a=b",
    "}; touch PWNED_12; {",
    "]] && touch PWNED_13 [[",
    "1 )) ; touch PWNED_14 ((",
    "EOF\ntouch PWNED_15\nEOF",
    "",
    "-n",
]
# Metacharacter-heavy text; no NUL (no command line carries one), no surrogates.
META = st.text(
    alphabet=st.sampled_from(list("ab'\"$()`;|&<>*?[]{}~#!\\ \t\n=,-"))
    | st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00")
)

# Words holding the value, each printed as one word.
HOLDERS = [
    V,
    f"'{V}'",
    f'"{V}"',
    f"pre'{V}'post",
    f'"a {V} b"',
    f"x\"{V}\"'y'",
    f"a{V}",
    f"{V}b",
    f"'{V}'\"{V}\"",
    f'"$HOME_UNSET{V}"',
    f"$HOME_UNSET{V}",
    f"~{V}",
    f"{{{V}",
]
# Places the scanner must refuse or keep safe (run for side effects only).
RISKY = [
    f": $(( {V} ))",
    f"(( {V} ))",
    f"# {V}",
    f"cat <<EOF >/dev/null\n{V}\nEOF",
    f"cat <<EOF >>o\nx {V} y\n{V}\nEOF",
    f"cat <<-EOF >>o\n\t{V}\n\tEOF",
    f"cat <<'EOF' >>o\n{V}\nEOF",
    f": `echo {V}`",
    f': "${{x:-{V}}}"',
    f"sh -c 'echo {V}'",
    f'eval "echo {V}"',
    f"echo {V} | sh",
    f"case {V} in x) :;; esac",
    f"case x in {V}) :;; esac",
    f": \\{V}",
    f": ${V}",
    f": <<{V}",
    f": $'{V}'",
    f"[[ {V} ]]",
    f"for i in {V}; do :; done",
    f"{V}",
    f'bash -c "echo {V}"',
    f"x={V}; echo $x",
    f": $[{V}]",
    f': "$(( {V} ))"',
    f"[[ {V} == x ]]",
    f"case x in x) : {V} ;& y) : ;; esac",
    f": $(case x in x) ;; {V}) ;; esac)",
    f"xargs sh -c 'echo {V}' </dev/null",
    f"find . -maxdepth 0 -exec sh -c 'echo {V}' \\;",
    f"cat <<< {V} >/dev/null",
    f": {V} <<EOF\n$(\nEOF",
]
FILLERS = [
    ":",
    ": ')'",
    ': "("',
    ": \\)",
    "# ) ' \" $( `\n:",
    ": $((1+(2*3)))",
    "((1))",
    "(( (1) ))",
    "[[ a == a ]]",
    ": <<< x",
    "cat <<EOF >/dev/null\n) ' \" $( `\nEOF",
    "cat <<'EOF' >/dev/null\n) $(\nEOF",
    "cat <<-EOF >/dev/null\n\t) (\n\tEOF",
    "case x in x) : ')' ;; esac",
    "echo \"$(echo ')' )\" >/dev/null",
    "x=$(case y in y) echo a;; esac)",
    ": `echo )`",
    ": $'a\\tb'",
    ': "${x:-)}"',
    ": ${#x} $# $?",
    "x=1",
    ": 2>/dev/null",
    "true |\n cat >/dev/null",
    "f() { :; }",
    "case x in (x) :;; (y) :;; esac",
    ': "$( (echo a) )"',
    ": $( case x in x) echo ')';; esac )",
    "if true; then :; fi",
    "{ :; }",
    "for i in 1 2; do :; done",
    ": $(echo a # )\n)",
    ": \\\n  x",
    ': "a\\"b"',
    ": 'a'\\''b'",
    "x=$((1))$(echo b)",
    "case x in\n x)\n  :\n  ;;\nesac",
    "[[ a =~ b ]] || :",
    "! :",
    ": >/dev/null <&0",
    ': $"a)b"',
    ": ${x#'}'}",
    ': "${x:-"$(echo \')\')"}"',
    "cat <(echo ')') >/dev/null",
    ": 2>&1",
    "time :",
    "until :; do :; done",
    "echo esac case in ')' >/dev/null",
    "x=case; y=esac",
    "for c in case esac; do :; done",
    "{ case x in x) :;; esac; }",
    "case x in x) : ;& y) : ;; esac",
    "case x in x) cat <<EOF >/dev/null\n)\nEOF\n;; esac",
    ": $(cat <<'EOF'\n) ' \"\nEOF\n)",
    "while false; do case x in x) ;; esac; done",
    "[[ ( a == a ) ]]",
    "[[ a < b ]]",
]


def _print(word: str) -> str:
    return f"printf '%s\\0' {word} >>o"


@st.composite
def statement(draw: st.DrawFn, depth: int = 0) -> str:
    """A statement that prints a word holding the value, somewhere inside wrappers."""
    if depth >= 3 or draw(st.integers(0, 3)) == 0:
        return _print(draw(st.sampled_from(HOLDERS)))
    inner = draw(statement(depth + 1))
    wrappers = [
        "( {} )",
        "{{ {}; }}",
        "if true; then {}; fi",
        "if false; then :; else {}; fi",
        "case x in x) {};; esac",
        "case x in (x) {};; esac",
        "case y in x) :;; *) {};; esac",
        "case x in x|y) {};; esac",
        "case x in\n x)\n  {}\n  ;;\nesac",
        "case x in x) {}\nesac",
        "for i in 1; do {}; done",
        "while :; do {}; break; done",
        "true && {}",
        "false || {}",
        ': "$({})"',
        ": $({})",
        "x=$({})",
        'x="$( {} )"',
        'echo "$(case x in x) {};; esac)"',
        "f() {{ {}; }}; f",
        ': "${{nope:-$({})}}"',
        "{} | cat",
        "true | {}",
        ': "$(\n{}\n)"',
        "until false; do {}; break; done",
        "case x in x) case y in y) {};; esac;; esac",
        ': "$(case x in x) case y in y) {};; esac;; esac)"',
        "! {}",
        "{} 2>&1",
        ': "${{nope:-"$({})"}}"',
        ": $(: $({}))",
        "( ( {} ) )",
        ": $( ( {} ) )",
        ': "$(case x in x) ( {} );; esac)"',
    ]
    return draw(st.sampled_from(wrappers)).format(inner)


@st.composite
def program(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.sampled_from(FILLERS), max_size=3))
    holders = [draw(statement())]
    if draw(st.integers(0, 3)) == 0:
        holders.append(draw(st.sampled_from(RISKY)))
    if draw(st.booleans()):
        holders.append(draw(statement()))
    items = parts + holders
    order = draw(st.permutations(items))
    seps = [draw(st.sampled_from(["; ", "\n", " && ", " || ", ";\n"])) for _ in order[1:]]
    return order[0] + "".join(s + item for s, item in zip(seps, order[1:], strict=True))


def _render(template: str, value: str) -> Script | None:
    try:
        return script_command(compile_value(template, lambda _p: None), {"v": value})
    except (Unquotable, ExpressionError):  # ExpressionError: the soup wrote "${{" itself
        return None


def _run(shell: str, command: str | Script, cwd: Path) -> tuple[bytes, list[str]]:
    """Run ``command`` (a script with its values, or plain text) with ``shell -c`` in ``cwd``:
    what it printed into ``o`` and the files it left."""
    for leftover in cwd.iterdir():
        leftover.unlink()
    script = command if isinstance(command, Script) else Script(command)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"}
    env.update(script.values)
    command = script.text
    proc = subprocess.Popen(
        [shell, "-c", command],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        proc.wait(timeout=20)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # and whatever it left running
        proc.wait()
    out = (cwd / "o").read_bytes() if (cwd / "o").exists() else b""
    return out, sorted(p.name for p in cwd.iterdir() if p.name != "o")


def check_program(template: str, hostile: str, cwd: Path) -> None:
    """The differential property for one command and one hostile value (see the module doc)."""
    plain_cmd = _render(template, PLAIN)
    hostile_cmd = _render(template, hostile)
    if plain_cmd is None or hostile_cmd is None:
        assert plain_cmd is None and hostile_cmd is None, template  # refusal is per place
        return
    assert plain_cmd.text == hostile_cmd.text  # the script never holds a value
    for shell in SHELLS:
        plain, made_plain = _run(shell, plain_cmd, cwd)
        got, made = _run(shell, hostile_cmd, cwd)
        assert not [m for m in made if m.startswith("PWNED")], (shell, hostile_cmd)
        assert made == sorted(m.replace(PLAIN, hostile) for m in made_plain), (shell, hostile_cmd)
        expect = plain.replace(PLAIN.encode(), hostile.encode())
        assert got == expect, (shell, hostile_cmd)


# Constructs that hand an expanded value to something that runs text: out of claim 2 (see the
# module doc). A template holding one is left out of the forced-places corpus.
EVALUATES = re.compile(
    r"\$\(\(|\(\(|\$\[|\[\[|\b(eval|sh|bash|dash|let|read|declare|typeset|local|export|"
    r"alias|trap|source|xargs|find|mapfile|readarray|getopts)\b|printf -v|-v\b|-exec|\B\.\s|@P"
)
ANY_PLACE = st.sampled_from([Place.BARE, Place.SINGLE, Place.DOUBLE])


def forced(template: str, value: str, chosen: list[Place]) -> Script:
    """``template``'s script as a scanner that answered ``chosen`` would write it."""
    literals = template.split(V)
    out, env = [literals[0]], {}
    for i, lit in enumerate(literals[1:], 1):
        env[f"RUNNER_VALUE_{i}"] = value
        out += [reference(f"RUNNER_VALUE_{i}", chosen[(i - 1) % len(chosen)]), lit]
    return Script("".join(out), env)


def check_no_value_runs(template: str, hostile: str, chosen: list[Place], cwd: Path) -> None:
    """Claim 2 for one command, one hostile value and the places a scanner might have said."""
    if V not in template or EVALUATES.search(template):
        return
    script = forced(template, hostile, chosen)
    for shell in SHELLS:
        _out, made = _run(shell, script, cwd)
        assert not [m for m in made if m.startswith("PWNED")], (shell, script)


@settings(
    max_examples=3000 if SOAK else 120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    template=program(),
    hostile=st.sampled_from(HOSTILE) | META,
    chosen=st.lists(ANY_PLACE, min_size=1, max_size=4),
)
def test_whatever_place_the_scanner_says_no_value_runs(
    template: str, hostile: str, chosen: list[Place], tmp_path: Path
) -> None:
    check_no_value_runs(template, hostile + PAYLOAD, chosen, tmp_path)


@pytest.mark.parametrize("risky", RISKY)
@pytest.mark.parametrize("place", [Place.BARE, Place.SINGLE, Place.DOUBLE])
def test_in_risky_places_a_wrong_place_runs_no_value(
    risky: str, place: Place, tmp_path: Path
) -> None:
    for hostile in HOSTILE:
        check_no_value_runs(risky, hostile + PAYLOAD, [place], tmp_path)


@settings(
    max_examples=4000 if SOAK else 150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(template=program(), hostile=st.sampled_from(HOSTILE) | META)
def test_accepted_commands_keep_values_data_in_real_shells(
    template: str, hostile: str, tmp_path: Path
) -> None:
    check_program(template, hostile, tmp_path)


# Fillers after which a value is refused: constructs dash and bash read differently.
DIVERGENT = {
    "cat <<EOF >/dev/null\n) ' \" $( `\nEOF",
    ': "${x:-"$(echo \')\')"}"',
    "case x in x) : ;& y) : ;; esac",
    "[[ ( a == a ) ]]",
    "cat <(echo ')') >/dev/null",  # process substitution: bash's; dash stops at a syntax error
}


def test_the_grammar_is_accepted_except_where_shells_diverge() -> None:
    """A scanner refusing everything would pass the fuzzer: the safe grammar must be accepted."""
    wrapped = [
        w.format(_print(h)) for w in ("{}", "( {} )", "case x in x) {};; esac") for h in HOLDERS
    ]
    assert [t for t in wrapped if _render(t, PLAIN) is None] == []
    refused = {f for f in FILLERS if _render(f"{f}\n{_print(V)}", PLAIN) is None}
    assert refused == DIVERGENT


@pytest.mark.parametrize("risky", RISKY)
def test_risky_places_are_refused_or_harmless(risky: str, tmp_path: Path) -> None:
    for hostile in HOSTILE:
        check_program(risky, hostile, tmp_path)


# -- token soup -------------------------------------------------------------------------------
# Random shell text around the printed value (and values among it), for the places a curated
# grammar does not think of. Most of it is a syntax error; what matters is that a value never
# changes how the text around it is read. The hostile values all end in a payload, so that no
# value equals a word of the soup (its patterns and tests answer the same for plain and hostile).
# No glob characters, no '(' alone (no function definitions: no fork bombs), no loops.
TOKENS = [
    *(" ", " ", "\n", ";", "|", "&&", "||", ")", "{", "}", "'", '"', "$", "`", "\\", "#"),
    *("case", "in", "esac", ";;", ";&", "x)", "(x)", "if", "then", "fi", "for", "do", "done"),
    *("[[", "]]", "((", "))", "$((", "$(", "${", "<<EOF", "<<'EOF'", "EOF", "<<<", ">/dev/null"),
    *("2>&1", "x", "y", "1", "=", "==", "!", "$'", "$x", "true", "false", "echo", "cat", "-n", V),
    *("-eq", "-v", "a[", "]", "read", "let", "declare", "-a", "export", "alias", "printf", "sh"),
    *("-c", "eval", "bash", "test", "$[", "\\\n"),  # no <( ), &>, |&: dash runs in background
]
PAYLOAD = "'; touch PWNED_Z #\")\n`touch PWNED_Y`$(touch PWNED_X)"


@st.composite
def soup(draw: st.DrawFn) -> str:
    tokens = draw(st.lists(st.sampled_from(TOKENS), max_size=12))
    return "".join(t + draw(st.sampled_from(["", " "])) for t in tokens)


@settings(
    max_examples=4000 if SOAK else 120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    before=soup(),
    holder=st.sampled_from(HOLDERS),
    after=soup(),
    sep=st.sampled_from(["\n", "; "]),
    hostile=st.sampled_from(HOSTILE) | META,
)
def test_token_soup_around_values_never_changes_how_the_shell_reads_them(
    before: str, holder: str, after: str, sep: str, hostile: str, tmp_path: Path
) -> None:
    check_program(before + sep + _print(holder) + sep + after, hostile + PAYLOAD, tmp_path)
