"""`${{ }}` values in shell commands are data: they arrive byte for byte, never run.

Classes (each list below is the corpus; add members as they are found):
- PLACES: where a value stands in the command (bare, in the user's '...', in "...", glued to
  other text, several in one command, inside $( ) and inside "$( )"); a hypothesis test runs
  arbitrary strings through each place with the real /bin/sh (and bash when present);
- HOSTILE: values that broke out before (quotes, $( ), backticks, newlines, globs, ...), through
  a real `runner apply` process with `-p`, in the shell step and in an `exec` check;
- REFUSED: places no quoting can make safe, refused at compile time with file:line:column;
- RAW: the explicit opt-in pastes shell text, and `runner check` reports it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.expr import compile_value
from runner.expr.shellquote import Place, Unquotable, places, render_command

SHELLS = [s for s in ("/bin/sh", shutil.which("bash"), shutil.which("dash")) if s]

# No NUL (no command line carries one) and no lone surrogates (not text).
TEXT = st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"))

# (command with one value V, what the shell prints for value v)
PLACES = {
    "single": ("printf '%s' '${{ v }}'", lambda v: v),
    "single-with-text": ("printf '%s' 'a ${{ v }} b'", lambda v: f"a {v} b"),
    "double": ("printf '%s' \"${{ v }}\"", lambda v: v),
    "double-with-text": ("printf '%s' \"x$HOME_NOT_SET${{ v }}y\"", lambda v: f"x{v}y"),
    "bare": ("printf '%s' ${{ v }}", lambda v: v),
    "bare-glued": ("printf '%s' pre${{ v }}post", lambda v: f"pre{v}post"),
    "twice": ("printf '%s|%s' ${{ v }} '${{ v }}'", lambda v: f"{v}|{v}"),
    "subshell": ("printf '%s' $(printf '%s' x${{ v }}x)", None),  # word-split: not compared
    "dq-subshell": ("printf '%s' \"$(printf '%s' '${{ v }}'; echo .)\"", lambda v: v + "."),
    "assignment": ("V=${{ v }}; printf '%s' \"$V\"", lambda v: v),
}


def _command(template: str, value: str) -> str:
    return render_command(compile_value(template, lambda _p: None), {"v": value})


def _sh(shell: str, command: str, cwd: Path) -> bytes:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"}
    done = subprocess.run(
        [shell, "-c", command], cwd=cwd, env=env, capture_output=True, timeout=20, check=False
    )
    assert done.returncode == 0, (command, done.stderr)
    return done.stdout


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("place", [p for p, (_, expect) in PLACES.items() if expect])
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=TEXT)
def test_any_value_arrives_byte_for_byte(
    shell: str, place: str, value: str, tmp_path: Path
) -> None:
    template, expect = PLACES[place]
    assert expect is not None
    out = _sh(shell, _command(template, value), tmp_path)
    assert out == expect(value).encode("utf-8", "surrogateescape")
    assert sorted(os.listdir(tmp_path)) == []  # nothing ran that made a file


@pytest.mark.parametrize("shell", SHELLS)
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=TEXT)
def test_values_inside_command_substitution_stay_one_word(
    shell: str, value: str, tmp_path: Path
) -> None:
    out = _sh(shell, _command(PLACES["subshell"][0], value), tmp_path)
    # $( ) output is word-split by the outer shell: the value stays data, its words remain
    words = [w for w in re.split(r"[ \t\n]+", f"x{value}x") if w]  # IFS: space, tab, newline
    assert out.decode("utf-8", "surrogateescape") == "".join(words)
    assert sorted(os.listdir(tmp_path)) == []


HOSTILE = [
    "Great title'; touch PWNED; echo '",
    'say "hi"; touch PWNED; echo "',
    "$(touch PWNED)",
    "`touch PWNED`",
    "${IFS}touch${IFS}PWNED",
    "x\ntouch PWNED\n",
    "x\r\ntouch PWNED",
    "'\\''; touch PWNED; '",
    "\\",
    "trailing backslash \\",
    "\\'; touch PWNED; #",
    "*",
    "~root",
    "$HOME $0 $$ $1",
    "!! !$",
    "a  b\tc",
    "-n",
    "--help",
    "",
    " ",
    "'",
    '"',
    "#not a comment",
    "a;b&c|d>e<f(g)h{i}j",
    "\x1b]0;owned\x07\x1b[2J",
    "ünïcödé 🎬 ✓",
    "$'\\x41'",
    '"$(touch PWNED)"',
    "%s%n%d",
    "\x7f\x01\x02",
]

E2E = """\
runner: 1
name: inj
params:
  title: {type: string, default: hello}
steps:
  single: {uses: shell, with: {run: "printf '%s' '${{ params.title }}' > out/single.txt",
           outputs: [out/single.txt]}}
  double: {uses: shell, with: {run: "printf '%s' \\"${{ params.title }}\\" > out/double.txt",
           outputs: [out/double.txt]}}
  bare: {uses: shell, with: {run: "printf '%s' ${{ params.title }} > out/bare.txt",
         outputs: [out/bare.txt]}}
  greet: {uses: shell, with: {run: "echo '${{ params.title }}' > out/greet.txt",
          outputs: [out/greet.txt]}}
  via_env:
    uses: shell
    with: {run: 'printf "%s" "$TITLE" > out/env.txt', env: {TITLE: "${{ params.title }}"},
           outputs: [out/env.txt]}
  checked:
    uses: shell
    needs: [single]
    with: {run: "cat out/single.txt", inputs: [out/single.txt]}
    check:
      - exec: {run: "test \\"$(cat out/single.txt; echo .)\\" = '${{ params.title }}.'"}
      - exec: {run: "test '${{ output.stdout }}' = \\"${{ params.title }}\\""}
"""


def _project(tmp_path: Path, pipeline: str) -> Path:
    root = tmp_path / "proj"
    (root / "out").mkdir(parents=True)
    (root / "runner.toml").write_text("")
    (root / "pipeline.yaml").write_text(textwrap.dedent(pipeline))
    return root


def _yaml_str(value: str) -> str:
    """A YAML double-quoted scalar: escapes for what is not printable (surrogate-free)."""
    body = "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}" for c in value)
    return f'"{body}"'


def _runner(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("title", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_params_arrive_as_data_in_a_real_apply(tmp_path: Path, title: str) -> None:
    root = _project(tmp_path, E2E)
    done = _runner(root, "apply", "pipeline.yaml", "--json", "-p", f"title={_yaml_str(title)}")
    assert done.returncode == 0, done.stderr
    assert not (root / "PWNED").exists()
    expect = title.encode()
    for name in ("single", "double", "bare", "env"):
        assert (root / "out" / f"{name}.txt").read_bytes() == expect, name
    if "\\" not in title and not title.startswith("-"):  # dash's echo reads \ and -n itself
        assert (root / "out" / "greet.txt").read_bytes() == expect + b"\n"
    assert sorted(p.name for p in root.iterdir()) == [
        ".runner",
        "out",
        "pipeline.yaml",
        "runner.toml",
    ]


REFUSED = {
    "backticks": "echo `echo ${{ params.t }}`",
    "param-expansion": "echo ${X:-${{ params.t }}}",
    "arithmetic": "echo $(( ${{ params.t }} + 1 ))",
    "comment": "echo hi # ${{ params.t }}",
    "quoted-heredoc": "cat <<'EOF'\nx ${{ params.t }}\nEOF",
    "heredoc-after-backslash": "cat <<EOF\n\\${{ params.t }}\nEOF",
    "after-backslash": "echo \\${{ params.t }}",
    "after-dollar": "echo $${{ params.t }}",
    "heredoc-delimiter": "cat <<${{ params.t }}",
    "whole-command": "${{ params.t }}",
    "backticks-in-double": 'echo "`echo ${{ params.t }}`"',
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_unquotable_places_are_refused_at_compile_time(tmp_path: Path, name: str) -> None:
    run = json.dumps(REFUSED[name])
    pipeline = f"""\
runner: 1
name: refused
params: {{t: {{type: string, default: x}}}}
steps:
  s:
    uses: shell
    with:
      run: {run}
"""
    root = _project(tmp_path, pipeline)
    done = _runner(root, "check", "pipeline.yaml")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "pipeline.yaml:8:" in done.stderr, done.stderr  # the line of `run:`
    assert "Traceback" not in done.stderr
    # the exec check refuses the same places
    rule = f"""\
runner: 1
name: refused
params: {{t: {{type: string, default: x}}}}
steps:
  s:
    uses: shell
    with: {{run: "true"}}
    check: [{{exec: {{run: {run}}}}}]
"""
    (root / "pipeline.yaml").write_text(rule)
    done = _runner(root, "check", "pipeline.yaml")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_places_after_heredoc_and_subshell_end_are_quoted_again() -> None:
    # once a here-document, $( ) or "..." has ended, a value is bare again
    literals = ("cat <<EOF\nbody\nEOF\necho ", "; echo $(true) ", ' "x" ', "")
    assert places(literals) == (Place.BARE, Place.BARE, Place.BARE)


def test_nul_in_a_value_fails_the_step_not_the_runner() -> None:
    with pytest.raises(Unquotable, match="NUL"):
        _command("echo ${{ v }}", "a\x00b")


RAW = """\
runner: 1
name: raw
params: {cmd: {type: string, default: "echo raw > out/raw.txt"}}
steps:
  s: {uses: shell, with: {run: "${{ params.cmd }}", raw: true, outputs: [out/raw.txt]}}
  c:
    uses: shell
    with: {run: "true"}
    check: [{exec: {run: "test -f ${{ params.cmd | length > 0 and 'out/raw.txt' }}", raw: true}}]
    needs: [s]
"""


def test_raw_shell_is_explicit_and_reported_by_check(tmp_path: Path) -> None:
    root = _project(tmp_path, RAW)
    done = _runner(root, "check", "pipeline.yaml", "--json")
    assert done.returncode == 0, done.stderr
    codes = [w["code"] for w in json.loads(done.stdout)["warnings"]]
    assert codes.count("raw-shell") == 2
    strict = _runner(root, "check", "pipeline.yaml", "--strict")
    assert strict.returncode == 2 and "raw-shell" in strict.stdout
    applied = _runner(root, "apply", "pipeline.yaml", "--json")
    assert applied.returncode == 0, applied.stderr
    assert (root / "out" / "raw.txt").read_text() == "raw\n"


def test_format_page_pipeline_keeps_working_and_its_key_is_unchanged(tmp_path: Path) -> None:
    """A value needing no quoting renders the command as before: the step key is the same."""
    assert _command("echo '${{ v }}' > out/greet.txt", "hello") == "echo 'hello' > out/greet.txt"
    assert _command("echo ${{ v }} done", "plain-word_1.0") == "echo plain-word_1.0 done"
    assert _command('echo "${{ v }}"', "hello world") == 'echo "hello world"'
