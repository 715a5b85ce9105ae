"""What a confined command said of the files the sandbox refused it: which project files its
step did not declare (``undeclared``), and the sentence that says what to declare
(``say_refused``). From the command's own words (runner/expr/confined.py confines it)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

_DENIED = re.compile(r"Permission denied|Operation not permitted|\[Errno 13\]|\[Errno 1\]")
_DENIAL_WORDS = ("Permission denied", "Operation not permitted")
_QUOTED = re.compile(r"['\"`‘“]([^'\"`’”\n]+)['\"’”]")
# What a tool says before the file's name ("cannot create x", dash's "can't open x").
_VERB = re.compile(
    r"^(?:.*\b(?:cannot|can't|could not|couldn't|unable to|failed to) "
    r"(?:create|open|read|write|touch|remove|stat|access|exec|execute)"
    r"(?: (?:regular )?(?:file|directory|temporary file))?) ",
    re.IGNORECASE,
)
_CONTRACTION = re.compile(r"(?<=[a-z])'(?=t\b)")
_WRITING = re.compile(r"creat|writ|touch|remov|renam|mkdir|temporary|for writing", re.IGNORECASE)


@dataclass(frozen=True)
class Refused:
    """A project file a confined command was refused: ``rel`` to the root, ``write`` or read."""

    rel: str
    write: bool


def undeclared(stderr: bytes, *, cwd: str, root: str, declared: Iterable[str]) -> list[Refused]:
    """The project files a confined command's error output says it was refused, that its step
    does not declare (``declared``: real paths), read ones first. From the words only: a
    program that says nothing of a refused file is not named (the read still failed)."""
    known = set(declared)
    found: dict[str, Refused] = {}
    inside = root.rstrip("/") + "/"
    for line in stderr.decode(errors="replace").splitlines()[-200:]:
        if not _DENIED.search(line):
            continue
        for name in _names_in(line):
            path = os.path.normpath(os.path.join(cwd, name))
            if path in known or path in found or not path.startswith(inside):
                continue
            if path[len(inside) :].startswith(".runner/"):
                continue  # runner's own state: never a step's to declare
            write = bool(_WRITING.search(line))
            if not os.path.lexists(path) and not (write and os.path.isdir(os.path.dirname(path))):
                continue  # not a file of the project: a program's or a message's word
            found[path] = Refused(os.path.relpath(path, root), write)
    return sorted(found.values(), key=lambda r: (r.write, r.rel))


def _names_in(line: str) -> list[str]:
    """Candidate file names in one line of a refusal: quoted ones, and the part before the
    denial as ``tool: NAME: Permission denied`` says it (less a verb such as "cannot open")."""
    line = _CONTRACTION.sub("", line)  # (the quote in "can't" opens no name)
    names = [m.group(1).strip() for m in _QUOTED.finditer(line)]
    parts = line.split(": ")
    for i, part in enumerate(parts[1:], start=1):
        if part.strip() in _DENIAL_WORDS or part.startswith("[Errno"):
            before = _VERB.sub("", parts[i - 1]).strip()
            if before and not before.isdigit() and not _QUOTED.search(before):
                names.append(before)
    return [n for n in names if n and "\x00" not in n]


def say_refused(refused: list[Refused]) -> str:
    """One sentence naming what to declare."""
    reads = [r.rel for r in refused if not r.write]
    writes = [r.rel for r in refused if r.write]
    parts = []
    if reads:
        parts.append(
            f"the sandbox refused reading {_names(reads)}, not among the step's inputs: declare "
            f"{'it' if len(reads) == 1 else 'them'} in inputs:"
        )
    if writes:
        parts.append(
            f"the sandbox refused writing {_names(writes)}, not among the step's outputs: "
            f"declare {'it' if len(writes) == 1 else 'them'} in outputs:"
        )
    return "; ".join(parts)


def _names(rels: list[str]) -> str:
    shown = ", ".join(rels[:5])
    return shown + (f" and {len(rels) - 5} more" if len(rels) > 5 else "")
