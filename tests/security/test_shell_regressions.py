"""Shell quoting holes, each as a plain case (found by hand or by test_shell_fuzz.py).

- CASE_ARM: a `case` pattern's `)` inside "$( )" was taken as closing the `$(`, so a value in the
  arm stood bare while quoted for "...": `a; touch PWNED_CASE` ran (issue 33). Through a real
  `runner apply` with `-p`, in the shell step, an `exec` check, `when: {exec:}` and a for_each
  item;
- ACCEPTED: commands whose structure the scanner now follows (nested $( ), (( )), [[ ]], case
  arms, comments and here-documents inside $( ), functions, line continuations); each runs with
  hostile values under bash and dash and must print the value as one word, byte for byte;
- REFUSED: contexts it cannot prove (shells disagree, arithmetic, $'...') and text that is parsed
  again as shell (`sh -c`, `bash -c`, `eval`, `ssh`, `su -c`, `find -exec sh -c`, `| sh`):
  compile errors with file:line:column and the `env:` hint, unless `raw: true`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runner.expr import compile_value
from runner.expr.shellquote import Place, Unquotable, places, render_command

from .test_shell_fuzz import HOSTILE, SHELLS, _run

V = "${{ v }}"
CASE_ARM = 'echo "$(case x in x) echo ${{ v }};; esac)"'


def _render(template: str, value: str) -> str:
    return render_command(compile_value(template, lambda _p: None), {"v": value})


def _literals(template: str) -> tuple[str, ...]:
    return tuple(template.split(V))


@pytest.mark.parametrize("shell", SHELLS)
def test_a_value_in_a_case_arm_inside_double_quoted_substitution_stays_data(
    shell: str, tmp_path: Path
) -> None:
    command = _render(CASE_ARM + " >o", "a; touch PWNED_CASE")
    out, made = _run(shell, command, tmp_path)
    assert made == []
    assert out == b"a; touch PWNED_CASE\n"


ACCEPTED = {
    "case-arm-in-dq-subst": f": \"$(case x in x) printf '%s\\0' {V} >>o;; esac)\"",
    "case-arm-bare": f"case x in x) printf '%s\\0' {V} >>o;; esac",
    "case-paren-pattern": f": \"$(case x in (x) :;; esac)\"; printf '%s\\0' {V} >>o",
    "case-multiline": f"x=$(case x in\n  x) echo a\n  ;;\nesac); printf '%s\\0' {V} >>o",
    "nested-case": f": \"$(case a in a) case b in b) echo;; esac;; esac)\"; printf '%s\\0' {V} >>o",
    "case-last-arm-no-dsemi": f": $(case x in x) echo\nesac); printf '%s\\0' {V} >>o",
    "subshell-in-subst": f": \"$( (echo ')') )\"; printf '%s\\0' {V} >>o",
    "arith-in-subst": f": \"$(echo $((1+(2*3))))\"; printf '%s\\0' {V} >>o",
    "arith-command": f"((1)); (( (2) )); printf '%s\\0' {V} >>o",
    "dbracket": f"[[ a == a && b == b ]]; printf '%s\\0' {V} >>o",
    "comment-in-subst": f": \"$(echo a # ) ' \"\n)\"; printf '%s\\0' {V} >>o",
    "heredoc-in-subst": f"x=$(cat <<EOF\n) ' \" (\nEOF\n); printf '%s\\0' {V} >>o",
    "quoted-heredoc-in-subst": f"x=$(cat <<'EOF'\n) ' \" $(\nEOF\n); printf '%s\\0' {V} >>o",
    "function": f"f() {{ printf '%s\\0' {V} >>o; }}; f",
    "continuation": f"printf '%s\\0' \\\n  {V} \\\n  >>o",
    "escaped-quotes": f': \\\' \\" \\); printf \'%s\\0\' "a\\"{V}" >>o',
    "dollar-hash": f": $# ${{#x}}; printf '%s\\0' {V} >>o",
    "backticks-before": f": `echo ')'`; printf '%s\\0' {V} >>o",
    "tilde-glued": f"printf '%s\\0' ~{V} >>o",
    "brace-glued": f"printf '%s\\0' {{{V} >>o",
    "sh-c-argument": f'sh -c \'printf "%s\\0" "$1" >>o\' sh {V}',
    "sh-after-the-pipeline": f"printf '%s\\0' {V} | cat >>o; sh -c :",
    "dbracket-operator-value": f"[[ {V} ]] || :; printf '%s\\0' {V} >>o",
    "local-assignment": f"f() {{ local a={V}; printf '%s\\0' \"$a\" >>o; }}; f",
    "export-assignment": f'export "A={V}"; printf \'%s\\0\' "$A" >>o',
    "dbracket-string-compare": f"[[ {V} == x ]] || printf '%s\\0' {V} >>o",
    "test-eq-is-no-arithmetic": f"[ {V} -eq 1 ] 2>/dev/null; printf '%s\\0' {V} >>o",
    "interpreter-argv": f"python3 -c 'import sys; sys.stdout.write(sys.argv[1] + chr(0))' {V} >>o",
    "awk-file-operand": f"awk '{{}}' /dev/null {V} 2>/dev/null; printf '%s\\0' {V} >>o",
    "pipe-into-cat": f"printf '%s\\0' {V} | cat >>o",
}


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_followed_structures_are_accepted_and_values_arrive_byte_for_byte(
    name: str, tmp_path: Path
) -> None:
    template = ACCEPTED[name]
    places(_literals(template))  # accepted: raises otherwise
    for shell in SHELLS:
        for value in HOSTILE:
            out, made = _run(shell, _render(template, value), tmp_path)
            assert made == [], (shell, name, value)
            lead = {"tilde-glued": "~", "brace-glued": "{", "escaped-quotes": 'a"'}.get(name, "")
            assert out == (lead + value).encode() + b"\0", (shell, name, value)


def test_values_that_would_be_keywords_or_assignments_are_quoted() -> None:
    assert _render(f"{V} x", "a=b") == "'a=b' x"  # not an assignment prefix
    assert _render(f"case x in {V}) :;; esac", "esac") == "case x in 'esac') :;; esac"
    assert _render(f"echo {V}", "a,b") == "echo 'a,b'"  # no brace expansion in bash
    assert _render(f"echo {V}", "plain-word_1.0") == "echo plain-word_1.0"  # keys unchanged


REFUSED = {
    "sh-c": f"sh -c 'echo {V}'",
    "bash-c-double": f'bash -c "echo {V}"',
    "bash-lc": f"bash -lc 'echo {V}'",
    "dash-options": f"dash -e -c 'echo {V}'",
    "eval": f'eval "echo {V}"',
    "xargs-sh": f"printf '%s\\n' 1 | xargs sh -c 'echo {V}'",
    "find-exec": f"find . -exec sh -c 'echo {V}' \\;",
    "ssh": f"ssh host echo {V}",
    "su-c": f"su nobody -c 'echo {V}'",
    "sudo-sh": f"sudo -u nobody sh -c 'echo {V}'",
    "trap": f"trap 'echo {V}' EXIT",
    "pipe-into-sh": f"printf '%s' {V} | sh",
    "pipe-into-bash-later": f"echo {V} | tr a b | bash",
    "herestring-into-bash": f"bash <<< {V}",
    "pipe-into-xargs-sh": f"echo {V} | xargs -I{{}} sh -c 'echo {{}}'",
    "pipe-into-sh-inside-subst": f"x=$(echo {V} | sh); echo ok",
    "quoted-shell-name": f"'sh' -c 'echo {V}'",
    "alias": f"alias x='echo {V}'",
    "array-subscript": f"a[{V}]=1",
    "array-subscript-quoted": f"a['{V}']=1",
    "read-name": f"read {V} <<< x",
    "printf-v": f"printf -v {V} x",
    "test-v": f"test -v {V}",
    "let": f"let {V}",
    "declare-a": f"declare -a a={V}",
    "local-i": f"f() {{ local -i a={V}; }}",
    "export-name": f"export {V}",
    "dbracket-eq": f"[[ {V} -eq 1 ]]",
    "dbracket-eq-after": f"[[ 1 -lt '{V}' ]]",
    "dbracket-v": f"[[ -v {V} ]]",
    "python-c": f"python3 -c 'print(\"{V}\")'",
    "python-cluster": f"python3 -Sc 'x = \"{V}\"'",
    "perl-pe": f"perl -pe 's/x/{V}/' /dev/null",
    "perl-glued": f"perl -e'print \"{V}\"'",
    "node-eval": f"node --eval 'console.log(\"{V}\")'",
    "awk-program": f"awk '{{print \"{V}\"}}' /dev/null",
    "sed-script": f"sed 's/x/{V}/' /dev/null",
    "sed-second-expression": f"sed -e 's/a/b/' -e 's/x/{V}/' /dev/null",
    "jq-filter": f"jq '.{V}' f.json",
    "pipe-into-python": f"echo {V} | python3",
    "subst-into-sh-c": f'sh -c "$(printf %s {V})"',
    "arith": f"echo $(( {V} + 1 ))",
    "arith-command": f"(( {V} ))",
    "ansi-c": f"echo $'{V}'",
    "after-ansi-c-escape": f"echo $'a\\'b' {V}",
    "param-in-double": f'echo "${{x:-{V}}}"',
    "after-quote-in-dq-param": f"echo \"${{x:-'a}}'}}\" {V}",
    "after-dollar-paren-paren-ambiguity": f"echo $((echo a); (echo b)) {V}",
    "after-bash-arith": f"echo $[1] {V}",
    "after-heredoc-in-arith-command": f"(( 1 << 2 ))\n{V}",
    "after-subst-in-heredoc": f"cat <<EOF\n$(echo\nEOF\n)\necho {V}",
    # bash evaluates a body's $(( )) as arithmetic (found by the fuzzer: a here-document whose
    # delimiter line never comes, the rest of the command its body)
    "arith-in-heredoc-body": f"cat <<EOF\n$(( {V} ))\nEOF",
    "subst-in-heredoc-body": f"cat <<-EOF >/dev/null\n\t) (\n\tEOF; : $(( {V} ))",
    "after-amp-redirect": f": &>/dev/null; echo {V}",
    "after-pipe-amp": f"echo a |& cat; echo {V}",
    "case-in-position": f"case x {V} in x) :;; esac",
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_contexts_it_cannot_prove_are_refused(name: str) -> None:
    with pytest.raises(Unquotable):
        places(_literals(REFUSED[name]))


def test_places_are_bare_single_and_double_where_they_stand() -> None:
    got = places(_literals(f'echo "$(case x in x) echo {V} \'{V}\' "{V}";; esac)"'))
    assert got == (Place.BARE, Place.SINGLE, Place.DOUBLE)


E2E = """\
runner: 1
name: casearm
params:
  title: {type: string, default: hello}
steps:
  arm:
    uses: shell
    with:
      run: 'echo "$(case x in x) printf %s ${{ params.title }};; esac)" > out/arm.txt'
      outputs: [out/arm.txt]
    check:
      - exec: {run: 'test "$(case x in x) printf %s ${{ params.title }};; esac)" = "$(cat out/arm.txt)"'}
  gated:
    uses: shell
    needs: [arm]
    when: {exec: {run: ': "$(case x in x) echo ${{ params.title }};; esac)"'}}
    with: {run: "echo gated > out/gated.txt", outputs: [out/gated.txt]}
  each:
    uses: shell
    for_each: "${{ [params.title, params.title ~ '2'] }}"
    with:
      run: 'echo "$(case x in x) printf %s ${{ item }};; esac)" > out/each${{ index }}.txt'
      outputs: ["out/each${{ index }}.txt"]
"""


def _project(tmp_path: Path, pipeline: str) -> Path:
    root = tmp_path / "proj"
    (root / "out").mkdir(parents=True)
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


def test_case_arm_value_stays_data_in_a_real_apply(tmp_path: Path) -> None:
    root = _project(tmp_path, E2E)
    title = "a; touch PWNED_CASE"
    done = _runner(root, "apply", "pipeline.yaml", "--json", "-p", f"title={json.dumps(title)}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (root / "PWNED_CASE").exists()
    assert (root / "out" / "arm.txt").read_text() == title + "\n"
    assert (root / "out" / "gated.txt").read_text() == "gated\n"
    assert (root / "out" / "each0.txt").read_text() == title + "\n"
    assert (root / "out" / "each1.txt").read_text() == title + "2\n"


REPARSED = """\
runner: 1
name: reparsed
params: {t: {type: string, default: x}}
steps:
  s:
    uses: shell
    with:
      run: "sh -c 'echo ${{ params.t }}'"
      RAW
"""


def test_a_value_in_sh_c_is_a_compile_error_unless_raw(tmp_path: Path) -> None:
    root = _project(tmp_path, REPARSED.replace("RAW", ""))
    done = _runner(root, "check", "pipeline.yaml")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "pipeline.yaml:8:" in done.stderr and "sh -c" in done.stderr, done.stderr
    assert "env:" in done.stderr and "Traceback" not in done.stderr
    (root / "pipeline.yaml").write_text(REPARSED.replace("RAW", "raw: true"))
    done = _runner(root, "check", "pipeline.yaml", "--json")
    assert done.returncode == 0, done.stderr
    assert [w["code"] for w in json.loads(done.stdout)["warnings"]] == ["raw-shell"]
