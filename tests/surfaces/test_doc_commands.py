"""Every runner command the README and docs/ show does what the page says (issue 42, section 3).

- Each command in a fenced block (a `sh` block's `runner ...` lines, a transcript's `$ runner ...`
  lines) runs, page by page in order, in a scratch copy of the project (its pipelines, prompts,
  examples, cards and runner.toml), and ends as a run may (0, or 7 at a gate); RUN is the run
  the page's last `runner apply` made, a run id the page prints is the run just made. A transcript's output lines must be
  in what the command printed, in order (run ids, durations, digests and times aside).
- `runner serve` prints the URL its page's comment shows (then it is stopped).
- (Each pipeline a page shows passes `runner check`: tests/pipeline/test_output_reads.py.)
- Every command and option an inline `runner ...` names exists.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest

from runner.surfaces.cli.app import cli
from tests.conftest import runner_bin
from tests.webdriving import free_port

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md"))]
PROJECT_PARTS = ("runner.toml", "pipelines", "prompts", "examples", "cards")
RUN_ID = re.compile(r"\b\d{8}-\d{6}-[0-9a-f]{6}\b")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
# Commands whose output the offline project cannot give, each with why: not run (their options
# are checked by test_every_command_and_option_a_page_names_exists).
NOT_RUN = {
    ("state.md", "runner costs --since 7d"): "the spend of a paid provider (fake is free)",
}
OK_EXITS = (0, 7)  # done, or waiting at a gate (docs/commands.md)
# What a command shown as an example must not say: it would show that the example does nothing.
IN_VAIN = ("not read by the template", "warning:")


@dataclass
class Command:
    page: Path
    line: int
    text: str
    expected: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: {self.text}"


def _logical_lines(body: str, first: int) -> list[tuple[int, str]]:
    """A block's lines with backslash continuations joined, each with its line number."""
    out: list[tuple[int, str]] = []
    pending, start = "", first
    for n, line in enumerate(body.splitlines(), first):
        if not pending:
            start = n
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    return out


def fenced_commands(page: Path) -> list[Command]:
    text = page.read_text(encoding="utf-8")
    found: list[Command] = []
    for m in FENCE.finditer(text):
        lang, body = m.group(1), m.group(2)
        first = text.count("\n", 0, m.start(2)) + 1
        lines = _logical_lines(body, first)
        transcript = any(line.startswith("$ ") for _n, line in lines)
        current: Command | None = None
        for n, line in lines:
            if transcript:
                if line.startswith("$ "):
                    current = None
                    if line[2:].startswith("runner "):
                        current = Command(page, n, line[2:].strip())
                        found.append(current)
                elif current is not None:
                    current.expected.append(line)
            elif lang == "sh":  # `runner ...` lines, and the runner parts of a && chain
                parts = [p.strip() for p in line.split("&&")]
                if parts[0].startswith("runner "):
                    found.append(Command(page, n, line.strip()))
                elif any(p.startswith("runner ") for p in parts):
                    chain = parts[next(i for i, p in enumerate(parts) if p.startswith("runner ")) :]
                    found.append(Command(page, n, " && ".join(chain)))
    return found


def _mask(text: str) -> str:
    text = RUN_ID.sub("RUN_ID", text)
    text = re.sub(r"\b\d+\.\d+s\b", "Ns", text)
    text = re.sub(r"\b[0-9a-f]{8,64}\b", "HEX", text)
    text = re.sub(r"\b\d{4}-\d{2}-\d{2}( \d{2}:\d{2}(:\d{2})?)?\b", "WHEN", text)
    text = re.sub(r"\b\d{2}:\d{2}:\d{2}\b", "WHEN", text)
    return " ".join(text.split())


def missing_lines(expected: list[str], printed: str) -> list[str]:
    """The expected lines (masked, in order; `...` skipped) not found in what was printed."""
    got = [_mask(line) for line in printed.splitlines() if line.strip()]
    missing, at = [], 0
    for line in expected:
        want = _mask(line)
        if not want or want == "...":
            continue
        want = want.removesuffix("...").rstrip()  # "text ...": the line goes on
        hit = next((i for i in range(at, len(got)) if want in got[i]), None)
        if hit is None:
            missing.append(line)
        else:
            at = hit + 1
    return missing


def scratch(tmp: Path) -> Path:
    for part in PROJECT_PARTS:
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, tmp / part)
        elif src.is_file():
            shutil.copy(src, tmp / part)
    return tmp


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_")}
    env["NO_COLOR"] = "1"
    env["RUNNER_SERVER"] = "0"  # no warm server outlives the test (test_warm_server.py has them)
    return env


def _latest(cwd: Path) -> str | None:
    """The newest run's id: a look-up between the page's commands, not one of them, so it is
    asked in this process (the page's own commands each run as `runner` in its own process)."""
    import json

    from click.testing import CliRunner

    old = Path.cwd()
    os.chdir(cwd)
    try:
        res = CliRunner().invoke(
            cli,
            ["runs", "list", "--limit", "1", "--json"],
            env={k: None for k in os.environ if k.startswith("RUNNER_")},
        )
    finally:
        os.chdir(old)
    if res.exit_code != 0:
        return None
    runs = json.loads(res.stdout)["runs"]
    return str(runs[0]["id"]) if runs else None


def serve_prints_its_url(command: Command, cwd: Path) -> None:
    words = [w for w in shlex.split(command.text, comments=True) if w != "--open"]
    if "--port" in words:
        del words[words.index("--port") : words.index("--port") + 2]
    proc = subprocess.Popen(
        [*runner_bin(), *words[1:], "--port", str(free_port())],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(),
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
    comment = command.text.split("#", 1)[1] if "#" in command.text else ""
    shown = re.search(r"https?://\S+", comment)
    assert "http://127.0.0.1:" in first, f"{command}: printed {first!r}"
    if shown:  # the page's URL, token and port aside, is the one printed
        want = re.sub(r":\d+/", ":PORT/", shown.group(0)).split("=", 1)[0]
        got = re.sub(r":\d+/", ":PORT/", first.split("runner serve: ", 1)[-1]).split("=", 1)[0]
        assert got == want, f"{command}: the page shows {want}..., runner serve prints {got}..."


def run_page(page: Path, cwd: Path) -> list[str]:
    """Run the page's commands in order; each failure, said."""
    failures: list[str] = []
    page_run: str | None = None
    for command in fenced_commands(page):
        if (page.name, command.text) in NOT_RUN:
            continue
        if command.text.startswith("runner serve"):
            serve_prints_its_url(command, cwd)
            continue
        for part in command.text.split("&&"):
            words = shlex.split(part, comments=True)
            if words[:1] == ["cd"]:
                cwd = cwd / words[1]
                continue
            latest = _latest(cwd)
            words = [RUN_ID.sub(latest or "latest", w) for w in words]  # the run just made
            words = [(page_run or latest or w) if w == "RUN" else w for w in words]
            res = subprocess.run(
                [*runner_bin(), *words[1:]],
                cwd=cwd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,  # one stream, in the order a terminal shows it
                text=True,
                env=_env(),
                timeout=300,
            )
            printed = res.stdout
            if res.returncode not in OK_EXITS:
                failures.append(f"{command}\n  exit {res.returncode}: {printed.strip()[-600:]}")
                continue
            vain = [line for line in printed.splitlines() if any(w in line for w in IN_VAIN)]
            if vain:
                failures.append(f"{command}\n  says it does nothing: {vain}")
            if words[1] == "apply":  # RUN: the run the page's last apply made
                page_run = _latest(cwd)
            if not command.expected:
                continue
            missing = missing_lines(command.expected, printed)
            if missing:
                failures.append(
                    f"{command}\n  the page shows lines it did not print: {missing}\n"
                    f"  it printed:\n{printed}"
                )
    return failures


RUN_PAGES = [p for p in PAGES if fenced_commands(p)]


@pytest.mark.parametrize("page", RUN_PAGES, ids=[p.name for p in RUN_PAGES])
def test_the_commands_a_page_shows_do_what_it_says(page: Path, tmp_path: Path) -> None:
    failures = run_page(page, scratch(tmp_path))
    assert not failures, "\n\n".join(failures)


INLINE = re.compile(r"`(runner [^`]+)`")


def _command(words: list[str]) -> click.Command | None:
    cmd: click.Command = cli
    for word in words:
        if not isinstance(cmd, click.Group) or word not in cmd.commands:
            break
        cmd = cmd.commands[word]
    return None if cmd is cli else cmd


def test_every_command_and_option_a_page_names_exists() -> None:
    wrong = []
    for page in PAGES:
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for m in INLINE.finditer(line):
                words = m.group(1).split()[1:]
                cmd = _command(words)
                if cmd is None:
                    if words and re.fullmatch(r"[a-z][a-z-]*", words[0]):  # no such command
                        wrong.append(f"{page.relative_to(ROOT)}:{n}: {m.group(1)} ({words[0]})")
                    continue
                if isinstance(cmd, click.Group) and len(words) > 1:
                    sub = words[1]
                    if re.fullmatch(r"[a-z][a-z-]*", sub) and sub not in cmd.commands:
                        wrong.append(f"{page.relative_to(ROOT)}:{n}: {m.group(1)} ({sub})")
                    continue
                known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
                known |= {"--help"}
                for word in words:
                    option = word.split("=", 1)[0].strip("[](),.;:|")
                    if option.startswith("--") and option not in known:
                        wrong.append(f"{page.relative_to(ROOT)}:{n}: {m.group(1)} ({option})")
    assert not wrong, "\n".join(wrong)
