"""Every command family prints data inert on a real terminal, and its --json is the exact data.

The class: a value that reaches a terminal from data (a -p value, an item id, a gate's reviewer
and comment, a document in a collection, a file or folder name, a provider's name or URL, a
remote's URL, a rendered prompt) carrying an OSC 52 clipboard write, a CSI screen clear, an
8-bit CSI, DEL, a bidi override or a non-UTF-8 file name. Each command runs as a real
``python -m runner`` process whose stdout and stderr are a pseudo-terminal in raw mode (click
strips CSI sequences only when the output is not a terminal, so a pipe would hide them), with
runner's own colours off (NO_COLOR, TERM=dumb): any ESC in what arrives came from data.

A source check keeps it a class: no module under runner/surfaces/cli prints except through
``runner.surfaces.cli.termtext`` (echo, echo_block, echo_json, echo_rendered) or the reporters.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import textwrap
import tty
from pathlib import Path

import pytest

from runner.surfaces.cli.app import json_line

REPO = Path(__file__).resolve().parents[2]
HOSTILE = "x\x1b]52;c;cHduZWQ=\x07\x1b[2J\x9b31m\x7f\u202eevil\u2066"
RAW = ("\x1b", "\x07", "\x9b", "\x7f", "\u202e", "\u2066")
FAKE = "run 1: completed"


def _inert(text: str) -> None:
    for c in RAW:
        assert c not in text, (repr(c), text)
    assert not any(line.startswith(FAKE) for line in text.splitlines()), text


def _holds(doc: object, value: str) -> bool:
    """``value`` is one of the strings in ``doc`` (keys or values), byte for byte."""
    if isinstance(doc, dict):
        return any(_holds(k, value) or _holds(v, value) for k, v in doc.items())
    if isinstance(doc, list):
        return any(_holds(v, value) for v in doc)
    return doc == value


def _yaml(value: str) -> str:
    """``value`` as a double-quoted YAML scalar (escapes for everything not printable)."""
    body = "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}" for c in value)
    return f'"{body}"'


def on_tty(root: Path, *args: str, timeout: float = 120) -> tuple[int, str]:
    """(exit code, everything printed) of ``runner ARGS`` with stdout+stderr on a raw pty."""
    env = {k: v for k, v in os.environ.items() if k not in ("RUNNER_STATE", "FORCE_COLOR")}
    env.update(NO_COLOR="1", TERM="dumb", COLUMNS="100")
    master, slave = pty.openpty()
    tty.setraw(slave)  # no \n -> \r\n: what arrives is what runner wrote
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", *args],
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], timeout)
        if not ready:
            proc.kill()
            raise AssertionError(f"runner {args} printed nothing for {timeout}s")
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    code = proc.wait(timeout)
    text = b"".join(chunks).decode("utf-8", "surrogateescape")
    return code, text


def piped_json(root: Path, *args: str) -> tuple[int, object]:
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    done = subprocess.run(
        [sys.executable, "-m", "runner", *args, "--json"],
        cwd=root,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    out = done.stdout.decode("utf-8")
    _inert(out)  # JSON escapes, the same data
    return done.returncode, json.loads(out)


GATED = """\
runner: 1
name: gated
params: {title: {type: string, default: t}}
steps:
  say:
    uses: template
    with: {text: "{{ t }}", vars: {t: "${{ params.title }}"}}
  review:
    uses: human_gate
    needs: [say]
    with:
      summary: "${{ params.title }}"
      show: {said: "${{ steps.say.output.text }}"}
  store:
    uses: ingest
    needs: [review]
    with:
      collection: notes
      create: true
      documents: [{id: "${{ params.title }}", text: "${{ params.title }} zebra"}]
"""


@pytest.fixture
def gated(tmp_path: Path) -> tuple[Path, str]:
    (tmp_path / "runner.toml").write_text("")
    (tmp_path / "gated.yaml").write_text(GATED)
    code, printed = on_tty(tmp_path, "apply", "gated.yaml", "-p", f"title={_yaml(HOSTILE)}")
    assert code == 7, printed
    _inert(printed)
    code, doc = piped_json(tmp_path, "runs", "list")
    assert code == 0
    return tmp_path, doc["runs"][0]["id"]  # type: ignore[index]


def test_review_commands_print_gates_decisions_events_and_documents_inert(
    gated: tuple[Path, str],
) -> None:
    root, run_id = gated
    printed = [
        on_tty(root, "runs", "decisions", run_id),
        on_tty(root, "decide", run_id, "review", "approve", "--by", HOSTILE, "--comment", HOSTILE),
        on_tty(root, "runs", "events", run_id),
        on_tty(root, "runs", "cancel", HOSTILE),
        on_tty(root, "decide", HOSTILE, "review", "approve"),
        on_tty(root, "collections", "list"),
        on_tty(root, "collections", "show", "notes"),
        on_tty(root, "collections", "search", "notes", "zebra"),
        on_tty(root, "resume", run_id),
    ]
    assert printed[1][0] == 0, printed[1][1]  # the gate was decided and the run went on
    assert "approved by x\\e]52;c;cHduZWQ=\\x07\\e[2J\\x9b31m\\x7f\\u202eevil" in printed[1][1]
    assert "zebra" in printed[7][1]  # the document was found, its id shown escaped
    for _code, text in printed:
        _inert(text)
    lines = [json.loads(line) for line in printed[2][1].splitlines()]  # events: JSON lines
    assert any(ev.get("by") == HOSTILE for ev in lines)
    _code, doc = piped_json(root, "collections", "show", "notes")
    assert doc["documents"][0]["id"] == HOSTILE  # type: ignore[index]
    _code, doc = piped_json(root, "runs", "decisions", run_id)
    assert doc["decisions"][0]["by"] == HOSTILE  # type: ignore[index]


def test_plan_explain_render_and_cache_print_params_and_urls_inert(tmp_path: Path) -> None:
    (tmp_path / "runner.toml").write_text("")
    (tmp_path / "gated.yaml").write_text(GATED)
    remote = tmp_path / f"remote{HOSTILE.replace(chr(10), '')}"
    remote.mkdir()
    p = f"title={_yaml(HOSTILE)}"
    printed = [
        on_tty(tmp_path, "plan", "gated.yaml", "-p", p, "--item", HOSTILE),
        on_tty(tmp_path, "explain", "gated.yaml", "-p", p, "--item", HOSTILE),
        on_tty(tmp_path, "render", "gated.yaml", "-p", p),
        on_tty(tmp_path, "cache", "status", "--remote", str(remote)),
        on_tty(tmp_path, "cache", "pull", "gated.yaml", "-p", p, "--remote", str(remote)),
        on_tty(tmp_path, "cache", "push", "--remote", str(remote)),
    ]
    assert "evil" in printed[2][1]  # the rendered template is printed, escaped
    for _code, text in printed:
        _inert(text)
    code, doc = piped_json(tmp_path, "plan", "gated.yaml", "-p", p, "--item", HOSTILE)
    assert code == 0 and doc["executions"] == {"run": 2, "ask": 1}  # type: ignore[index]
    code, doc = piped_json(tmp_path, "render", "gated.yaml", "-p", p)
    assert doc["renders"][0]["text"] == HOSTILE  # type: ignore[index]
    code, doc = piped_json(tmp_path, "cache", "status", "--remote", str(remote))
    assert doc["remote"].endswith(HOSTILE)  # type: ignore[index]


def test_providers_print_names_urls_and_probe_errors_inert(tmp_path: Path) -> None:
    name = "bad\x1b]0;t\x07"
    (tmp_path / "runner.toml").write_text(
        textwrap.dedent(f"""\
        [providers.{json.dumps(name)}]
        type = "ollama"
        base_url = "http://127.0.0.1:9"
        [providers.broken]
        type = "ollama"
        base_url = "http://127.0.0.1:9/\\u001b]52;c;eA==\\u0007\\u202e"
        [providers.typo]
        type = "ollama"
        url = "\\u001b[2J"
        """)
    )
    code, printed = on_tty(tmp_path, "providers")
    assert code == 0 and "configured:" in printed and "down" in printed, printed
    assert "unknown setting(s) url" in printed  # typo: listed with its error
    assert "broken     error: " in printed and "not a URL requests go to" in printed
    _inert(printed)
    code, doc = piped_json(tmp_path, "providers")
    assert name in [p["name"] for p in doc["configured"]]  # type: ignore[index]


def test_thumb_and_card_commands_print_items_and_file_names_inert(tmp_path: Path) -> None:
    import shutil

    root = tmp_path
    (root / "pipelines").mkdir()
    shutil.copy(REPO / "pipelines" / "thumbnail.yaml", root / "pipelines" / "thumbnail.yaml")
    shutil.copytree(REPO / "prompts" / "thumbnail", root / "prompts" / "thumbnail")
    args = ("apply", "pipelines/thumbnail.yaml", "-q", "--state", ".runner")
    code, printed = on_tty(root, *args, "-p", "n=2", "--item", HOSTILE)
    assert code == 0, printed
    _inert(printed)
    code, doc = piped_json(root, "runs", "list", "--state", ".runner")
    run_id = doc["runs"][0]["id"]  # type: ignore[index]
    folder = "out" + HOSTILE.replace("\n", "")
    printed_all = [
        on_tty(root, "show", run_id, "--state", ".runner"),
        on_tty(root, "pick", run_id, HOSTILE, "--state", ".runner"),
        on_tty(root, "pick", run_id, "1", "--state", ".runner"),
        on_tty(root, "export", run_id, "--to", folder, "--state", ".runner"),
        on_tty(
            root,
            "iterate",
            run_id,
            "--n",
            "1",
            "-q",
            "--var",
            f"mood={_yaml(HOSTILE)}",
            "--state",
            ".runner",
        ),
        on_tty(root, "prompts", "lock", "--root", "."),
        on_tty(
            root,
            "edit",
            run_id,
            HOSTILE,
            "--from",
            "pipelines/thumbnail.yaml",
            "--state",
            ".runner",
        ),
    ]
    assert printed_all[3][0] == 0 and "wrote out" in printed_all[3][1]
    for _code, text in printed_all:
        _inert(text)
    code, doc = piped_json(root, "export", run_id, "--to", folder, "--state", ".runner")
    assert all(folder in f for f in doc["files"])  # type: ignore[index]


def test_an_argument_that_is_not_utf8_is_refused_and_printed_not_a_crash(tmp_path: Path) -> None:
    """A lone surrogate (how Python carries a non-UTF-8 argument or file name) cannot be sent
    to a terminal, a journal or JSON as is: printing it raised UnicodeEncodeError and applying
    a pipeline by such a name crashed in create_run ("runner hit a bug"). Refused, exit 2."""
    name = os.fsdecode(b"ok\xff\x1b[2J.yaml")  # 'ok\udcff\x1b[2J.yaml'
    (tmp_path / name).write_text(
        "runner: 1\nname: ok\nsteps:\n  a: {uses: shell, with: {run: 'true'}}\n"
    )
    printed = [
        on_tty(tmp_path, "validate", name),
        on_tty(tmp_path, "apply", name),
        on_tty(tmp_path, "runs", "show", "run-\udcff\x1b[2J"),
        on_tty(tmp_path, "decide", "r", "g", "\x1b]0;t\x07"),  # click's own message quotes it
    ]
    assert printed[0][0] == 2 and "'ok\\udcff\\e[2J.yaml' is not UTF-8 text" in printed[0][1]
    assert printed[1][0] == 2 and "is not UTF-8 text (byte 0xff)" in printed[1][1]  # not a crash
    assert printed[2][0] == 2 and "\\udcff" in printed[2][1]
    for _code, text in printed:
        assert "bug" not in text
        _inert(text)
    assert json.loads(json_line({"k": "\udcff\u202e\x9b"})) == {"k": "\udcff\u202e\x9b"}


def test_no_command_prints_around_termtext() -> None:
    """Every print in runner/surfaces/cli goes through termtext (or the reporters, which escape)."""
    allowed = {"termtext.py", "console.py"}
    direct = re.compile(r"\bclick\.(echo|secho)\(|\bprint\(|std(out|err)\.write\(|console\.print\(")
    found = []
    for path in sorted((REPO / "runner" / "surfaces" / "cli").glob("*.py")):
        if path.name in allowed:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if direct.search(line):
                found.append(f"{path.name}:{n}: {line.strip()}")
    emit = (REPO / "runner" / "surfaces" / "cli" / "base.py").read_text()
    assert "click.echo(json_line(doc))" in emit
    found = [f for f in found if "click.echo(json_line(doc))" not in f]
    assert found == []
