"""The shell forms of issue 40 that let a value run as code, each a plain case.

Values now reach a command through its environment (runner/expr/shellenv.py), so:

- a form the scanner misread (a here-document whose delimiter a backslash-newline continues, a
  newline inside ``$( )`` on a here-document's line) runs no value, whatever place the scanner
  said: the pasted text ran its payload, the script does not, under dash and bash, and through a
  real ``runner apply`` (a ``-p`` param in a shell step, an ``exec`` check, ``when: {exec:}``);
- a form where the user's own command hands a value to something that runs text (``| (sh)``,
  ``| env sh``, ``$SHELL -c``, ``s\\h -c``, process substitution, ``${x@P}``) is refused at compile
  time, as the scanner refuses ``| sh`` and ``sh -c``; bash arithmetic on a value is said by
  ``runner check``;
- the names runner gives values are its own: ``env:``, ``pass_env`` and the command text cannot
  use them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runner.expr import compile_value
from runner.expr.shellenv import script_command
from runner.expr.shellquote import Place, Unquotable, places, render_command

from .test_shell_fuzz import SHELLS, _run, forced

V = "${{ v }}"
HOSTILE = "$(touch PWNED_A)`touch PWNED_B`'; touch PWNED_C #\"; touch PWNED_D #"

# Commands the scanner accepts (it reads them otherwise than the shells do).
MISREAD = {
    # The scanner ends the delimiter at the backslash; the shells read EF, so the value's
    # line is inside the body, where a pasted $( ) runs.
    "heredoc-delimiter-continued": f"cat <<E\\\nF >o\nE\necho {V}\nEF\n",
    "heredoc-newline-in-subst": f"cat <<E >o; x=$(\necho)\nE\necho {V}\nE\ntrue\n",
}

# Commands that hand a value to something that runs it: refused, with the reason.
REFUSED = {
    "pipe-into-subshell-sh": (f"echo {V} | (sh)", "piped into `sh`"),
    "pipe-into-env-sh": (f"echo {V} | env sh", "piped into `sh`"),
    "pipe-into-exec-sh": (f"echo {V} | exec sh", "piped into `sh`"),
    "pipe-into-timeout-sh": (f"echo {V} | timeout 5 sh", "piped into `sh`"),
    "shell-variable-c": (f"$SHELL -c 'echo {V}'", "$SHELL -c"),
    "variable-named-sh-c": (f"c=sh; $c -c 'echo {V}'", "$SHELL -c"),
    "escaped-sh-c": (f"s\\h -c 'echo {V}'", "sh -c"),
    "process-substitution": (f"sh <(echo {V})", "process substitution"),
    "process-substitution-out": (f"echo {V} | tee >(sh)", "process substitution"),
    "prompt-transformation": (f'x={V}; echo "${{x@P}}"', "${...@...}"),
}


def _compiled(template: str) -> object:
    return compile_value(template, lambda _p: None)


@pytest.mark.parametrize("form", sorted(MISREAD))
@pytest.mark.parametrize("shell", SHELLS)
def test_a_misread_form_runs_no_value(form: str, shell: str, tmp_path: Path) -> None:
    template = MISREAD[form]
    script = script_command(_compiled(template), {"v": HOSTILE})
    assert HOSTILE not in script.text and "PWNED" not in script.text
    _out, made = _run(shell, script, tmp_path)
    assert [m for m in made if m.startswith("PWNED")] == []
    for place in Place:  # and whatever place a scanner had said
        _out, made = _run(shell, forced(template, HOSTILE, [place]), tmp_path)
        assert [m for m in made if m.startswith("PWNED")] == [], place


def test_the_misread_forms_ran_a_value_when_it_was_pasted(tmp_path: Path) -> None:
    """The cases have teeth: the value quoted into the text (the step's key still is) ran."""
    pasted = render_command(_compiled(MISREAD["heredoc-delimiter-continued"]), {"v": HOSTILE})
    _out, made = _run(SHELLS[0], pasted, tmp_path)
    assert "PWNED_A" in made


@pytest.mark.parametrize("form", sorted(REFUSED))
def test_a_value_handed_to_code_is_refused(form: str) -> None:
    template, reason = REFUSED[form]
    with pytest.raises(Unquotable) as caught:
        places(tuple(template.split(V)))
    assert reason in caught.value.reason


@pytest.mark.parametrize(
    "command",
    ["echo hi | env FOO=1 cat", "echo hi | (cat)", "env sh -c 'echo hi'", "$SHELL -c 'echo hi'"],
)
def test_the_same_commands_without_a_value_in_reach_are_accepted(command: str) -> None:
    assert places(tuple(f"echo {V}; {command}".split(V))) == (Place.BARE,)


def _project(tmp_path: Path, pipeline: str) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "runner.toml").write_text("")
    (root / "pipeline.yaml").write_text(textwrap.dedent(pipeline))
    return root


def _runner(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


APPLY = """\
runner: 1
name: forms
params:
  t: {type: string, default: x}
steps:
  step:
    uses: shell
    with: {run: %(run)s, outputs: [o]}
  checked:
    uses: shell
    needs: [step]
    with: {run: "true"}
    check:
      - exec: {run: %(check)s}
  gated:
    uses: shell
    needs: [step]
    when: {exec: {run: %(check)s}}
    with: {run: "true"}
"""


@pytest.mark.parametrize("form", sorted(MISREAD))
def test_a_misread_form_runs_no_value_in_a_real_apply(form: str, tmp_path: Path) -> None:
    run = MISREAD[form].replace(V, "${{ params.t }}")
    check = run.replace(">o", ">/dev/null")
    pipeline = APPLY % {"run": json.dumps(run), "check": json.dumps(check)}
    root = _project(tmp_path, pipeline)
    done = _runner(root, "apply", "pipeline.yaml", "-p", f"t={json.dumps(HOSTILE)}")
    assert done.returncode == 0, done.stderr
    assert [p.name for p in root.iterdir() if p.name.startswith("PWNED")] == []
    if form == "heredoc-delimiter-continued":  # printed as text: the wrong text, not code
        assert "PWNED_A" in (root / "o").read_text()


@pytest.mark.parametrize(
    ("with_", "said"),
    [
        ('{run: "echo hi", env: {RUNNER_VALUE_1: x}}', "env: RUNNER_VALUE_1"),
        ('{run: "echo hi", pass_env: [RUNNER_VALUE_X]}', "pass_env: RUNNER_VALUE_X"),
        ('{run: "echo $RUNNER_VALUE_1 ${{ params.t }}"}', "names RUNNER_VALUE_"),
    ],
)
def test_the_names_of_values_are_runners_own(with_: str, said: str, tmp_path: Path) -> None:
    pipeline = "runner: 1\nname: n\nparams: {t: {type: string, default: x}}\nsteps:\n"
    pipeline += f"  s: {{uses: shell, with: {with_}}}\n"
    root = _project(tmp_path, pipeline)
    done = _runner(root, "validate", "pipeline.yaml")
    assert done.returncode != 0
    assert said in done.stderr + done.stdout


def test_an_exec_check_cannot_use_the_names_either(tmp_path: Path) -> None:
    pipeline = """\
    runner: 1
    name: n
    steps:
      s:
        uses: shell
        with: {run: "true"}
        check: [{exec: {run: "true", env: {RUNNER_VALUE_2: y}}}]
    """
    done = _runner(_project(tmp_path, pipeline), "validate", "pipeline.yaml")
    assert done.returncode != 0
    assert "env: RUNNER_VALUE_2" in done.stderr + done.stdout


def test_bash_arithmetic_on_a_value_is_said_by_check(tmp_path: Path) -> None:
    pipeline = """\
    runner: 1
    name: n
    params: {t: {type: string, default: "1"}}
    steps:
      s:
        uses: shell
        with: {run: "x=${{ params.t }}; echo $((x + 1))"}
      plain:
        uses: shell
        with: {run: "echo ${{ params.t }}; echo $((1 + 1))"}
        check: [{exec: {run: "[ ${{ params.t }} -eq 1 ]"}}]
    """
    done = _runner(_project(tmp_path, pipeline), "check", "pipeline.yaml", "--json")
    warnings = json.loads(done.stdout)["warnings"]
    said = sorted((w["code"], w["message"].split("'")[1]) for w in warnings)
    assert said == [("shell-arithmetic", "plain"), ("shell-arithmetic", "s")]


@pytest.mark.parametrize("shell", SHELLS)
def test_a_value_in_an_unquoted_here_document_body_arrives_byte_for_byte(
    shell: str, tmp_path: Path
) -> None:
    template = f"cat <<EOF >o\nbefore {V} after\n$HOME_UNSET{V}\nEOF\ncat <<-E >>o\n\t{V}\n\tE"
    value = HOSTILE + "\nEOF\n\\$x`id`\\"
    script = script_command(_compiled(template), {"v": value})
    assert "${RUNNER_VALUE_1}" in script.text and "PWNED" not in script.text
    out, made = _run(shell, script, tmp_path)
    assert made == []  # (o aside)
    assert out.decode() == f"before {value} after\n{value}\n{value}\n"
