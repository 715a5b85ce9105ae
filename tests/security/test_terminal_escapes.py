"""Nothing runner prints carries a raw control sequence from data: item ids, params, model text,
a command's stderr and error messages quoting them are shown inert.

Classes (each list below is the corpus; add members as they are found):
- VALUES: the sequences that act on a terminal (OSC title, CSI screen clear and colour, BEL, CR
  overwriting a line, 8-bit CSI, bidi override, line separator, a newline faking a line);
- PATHS: where data is printed: the progress lines (plain and live), a failed step's reason (a
  command's stderr), warnings, the run summary, `runs list`, `runs show`, and error messages
  naming an unknown id; through real `runner` processes where a command prints them.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runner.engine.run.events import Event, EventType
from runner.surfaces.cli.console import LiveReporter, PlainReporter, WarningsReporter
from runner.surfaces.cli.termtext import safe, safe_block

FAKE = "  FAILED  fake-step: all is lost"
VALUES = {
    "osc-title": "\x1b]0;owned\x07",
    "csi-clear": "\x1b[2J\x1b[H",
    "colour": "\x1b[31mred",
    "bel": "\x07",
    "cr-overwrite": "innocent\r" + FAKE,
    "csi-8bit": "\x9b31m",
    "osc-8bit": "\x9d0;owned\x9c",
    "bidi": "abc\u202edcba",
    "line-separator": "a\u2028" + FAKE,
    "newline-fake-line": "x\n" + FAKE,
    "issue-example": "x\n" + FAKE + "\x1b]0;pwned\x07",
    "backspace": "secret\x08\x08\x08\x08\x08\x08public",
    "nul": "a\x00b",
}
RAW = ("\x1b", "\x07", "\r", "\x9b", "\x9d", "\x9c", "\u202e", "\u2028", "\x08", "\x00")


def _inert(text: str) -> None:
    for c in RAW:
        assert c not in text, repr(c)
    assert not any(line.startswith(FAKE) for line in text.splitlines()), text


@pytest.mark.parametrize("name", list(VALUES))
def test_safe_shows_every_value_inert(name: str) -> None:
    _inert(safe(VALUES[name]))
    _inert(safe(VALUES[name], lines=True))
    assert "\x1b" not in safe_block(VALUES[name])


def _events(value: str) -> list[Event]:
    return [
        Event(EventType.RUN_STARTED, "run-" + value, None, None, {"pipeline": value, "steps": 1}),
        Event(EventType.PHASE_ENTERED, "r", None, None, {"phase": value}),
        Event(EventType.STEP_STARTED, "r", value, None, {}),
        Event(EventType.STEP_RETRYING, "r", value, 1, {"attempt": 2, "reason": value}),
        Event(EventType.LOG, "r", value, None, {"level": "warning", "line": value}),
        Event(EventType.STEP_FAILED, "r", value, None, {"reason": value}),
        Event(EventType.STEP_SKIPPED, "r", value, None, {"reason": value}),
        Event(EventType.RUN_FINISHED, "r", None, None, {"status": value, "duration_s": 0}),
    ]


@pytest.mark.parametrize("name", list(VALUES))
@pytest.mark.parametrize("reporter", ["plain", "warnings", "live"])
def test_progress_reporters_print_data_inert(name: str, reporter: str) -> None:
    out = io.StringIO()
    rep = {
        "plain": lambda: PlainReporter(out, verbose=True),
        "warnings": lambda: WarningsReporter(out),
        "live": lambda: LiveReporter(3, out),
    }[reporter]()
    for event in _events(VALUES[name]):
        rep.event(event)
    rep.close()
    _inert(out.getvalue())


EVIL = "x\n" + FAKE + "\x1b]0;pwned\x07\x1b[2J\r\x9b31m\u202e"

FAILS = """\
runner: 1
name: loud
params: {title: {type: string, default: t}}
steps:
  say:
    uses: shell
    with: {run: "printf '%s\\\\n' '${{ params.title }}' >&2; exit 3"}
"""

SUCCEEDS = """\
runner: 1
name: quiet
params: {title: {type: string, default: t}}
steps:
  say: {uses: shell, with: {run: "printf '%s' '${{ params.title }}'"}}
"""


def _runner(root: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    done = subprocess.run(
        [sys.executable, "-m", "runner", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.stdout + done.stderr


def _yaml(value: str) -> str:
    body = "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}" for c in value)
    return f'"{body}"'


def test_a_real_apply_prints_params_items_and_stderr_inert(tmp_path: Path) -> None:
    (tmp_path / "runner.toml").write_text("")
    (tmp_path / "fails.yaml").write_text(textwrap.dedent(FAILS))
    (tmp_path / "ok.yaml").write_text(textwrap.dedent(SUCCEEDS))
    printed = [
        _runner(tmp_path, "apply", "fails.yaml", "-p", f"title={_yaml(EVIL)}", "--item", EVIL),
        _runner(tmp_path, "apply", "ok.yaml", "-p", f"title={_yaml(EVIL)}", "--item", EVIL, "-v"),
        _runner(tmp_path, "runs", "list"),
        _runner(tmp_path, "runs", "list", "--item", EVIL),
        _runner(tmp_path, "runs", "show", EVIL),  # an unknown id, quoted in the error
        _runner(tmp_path, "explain", "ok.yaml", "-p", f"title={_yaml(EVIL)}", "--item", EVIL),
        _runner(tmp_path, "export", EVIL, "--to", "out"),
    ]
    assert "exited with 3" in printed[0]  # the failure and its stderr are still shown
    for text in printed:
        _inert(text)
    runs = _runner(tmp_path, "runs", "list", "--json")
    assert "\\u001b" in runs or "\\u001b" in runs.lower()  # --json keeps the value, escaped
