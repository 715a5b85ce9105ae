"""`runner init`: a minimal working project."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ...errors import UsageError
from ...source.beneath import SymlinkRefused, open_nofollow

PIPELINE = """\
runner: 1
name: hello
description: A first pipeline - render a prompt, ask a model, then shout its reply.
params:
  title: {type: string, default: "hello, world"}
steps:
  prompt:
    uses: template
    with:
      template: prompts/hello.j2
      vars: {title: "${{ params.title }}"}
  greet:
    # The model call: on runner.toml's default provider (`fake`, offline and free, until you
    # configure a real one). A reply is journaled: re-applying never pays for it twice.
    uses: llm
    with:
      prompt: "${{ steps.prompt.output.text }}"
    check:
      - "${{ output.text | trim | length > 0 }}"
  shout:
    uses: shell
    with:
      run: >-
        mkdir -p out && printf '%s\\n' ${{ steps.greet.output.text }} > out/greeting.txt
        && tr a-z A-Z < out/greeting.txt > out/shout.txt
      outputs: [out/greeting.txt, out/shout.txt]
tests:
  default:
    params: {title: "snapshot me"}
"""

CONFIG = """\
# runner.toml marks this directory as the project root: its state is .runner/ here, found from
# any subdirectory (like git). Providers and prices are configured here: see runner's
# docs/providers.md and docs/state.md ("Plan before you pay").
[general]
default_provider = "fake"
"""

PROMPT = """\
Write a one-line greeting for: {{ title }}
"""

# The starter files, by path in the project; one already there is kept (`runner init` says so).
FILES = {
    "runner.toml": CONFIG,
    "pipeline.yaml": PIPELINE,
    "prompts/hello.j2": PROMPT,
}


def init_project(directory: Path) -> list[str]:
    """Writes the files of a minimal project into ``directory`` (kept where they exist) and the
    state's lines into its .gitignore. Nothing is written through a symlink below
    ``directory``: a symlinked .gitignore would get lines appended to a file outside the project,
    a dangling pipeline.yaml link would create one outside. Raises UsageError naming the link."""
    directory.mkdir(parents=True, exist_ok=True)
    created: list[str] = []
    for rel, text in FILES.items():
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL  # an existing file (or link) is kept
        try:
            fd = _open(directory, rel, flags)
        except FileExistsError:
            path = directory / rel
            if os.path.islink(path) and not os.path.exists(path):  # dangling: O_EXCL said so
                raise _refused(directory, rel) from None
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        created.append(rel)
    try:
        with os.fdopen(_open(directory, ".gitignore", os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise UsageError(f"{directory / '.gitignore'} is not a regular file")
            lines = f.read().decode("utf-8").splitlines()
    except FileNotFoundError:
        lines = []
    # The state, and the folder the web page exports to by default (runner serve).
    missing = [entry for entry in (".runner/", "exports/") if entry not in lines]
    if missing:
        fd = _open(directory, ".gitignore", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("\n".join([*lines, *missing]) + "\n")
        created.append(".gitignore")
    return created


def _open(directory: Path, rel: str, flags: int) -> int:
    try:
        return open_nofollow(directory, rel, flags, make_parents=True, mode=0o666)
    except SymlinkRefused as exc:
        raise _refused(directory, str(exc.filename)) from None


def _refused(directory: Path, rel: str) -> UsageError:
    return UsageError(
        f"{directory / rel} is a symlink; runner init does not write through one",
        hint="remove the link (or replace it with the file itself) and run runner init again",
    )
