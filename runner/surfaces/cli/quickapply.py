"""`runner apply` of an unchanged pipeline, answered before click is imported.

A steady no-op is start-up and a fingerprint check: click and the command group are a third of
its CPU (issue 43). ``answer`` reads a plain command line itself (the pipeline, -p, --item,
--state, --jobs, -q, --json), and when the fingerprint holds it journals the cached run and
prints what `runner apply` prints. Anything else (another command or option, an odd spelling, a
fingerprint that does not hold or asks for the schema, an error) is left to the full command,
which then decides everything again: this path only ever answers a no-op.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# Options that change nothing a no-op does, and whether each takes a value. Every other option
# (--force, --remote, --max-cost, --dry-run, ...) leaves the command line to click.
_FLAGS = {"-q": "quiet", "--quiet": "quiet", "--json": "json"}
_VALUED = {
    "-p": "param",
    "--param": "param",
    "--item": "item",
    "--state": "state",
    "-j": "jobs",
    "--jobs": "jobs",
}


class Args:
    """A command line ``answer`` may take: `apply FILE` and options a no-op can honour (a plain
    class: this path does not import dataclasses, ~5 ms)."""

    __slots__ = ("as_json", "file", "item", "params", "state")

    def __init__(
        self, file: str, params: dict[str, str], item: str | None, state: str | None, as_json: bool
    ) -> None:
        self.file = file
        self.params = params
        self.item = item
        self.state = state
        self.as_json = as_json


def parse(argv: list[str]) -> Args | None:
    """``argv`` (without the program) as `apply` arguments this path answers, else None."""
    if not argv or argv[0] != "apply":
        return None
    file: str | None = None
    values: dict[str, Any] = {"param": {}}
    flags: set[str] = set()
    rest = iter(argv[1:])
    for arg in rest:
        if any("\ud800" <= c <= "\udfff" for c in arg):
            return None  # not UTF-8: click says so
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if not arg.startswith("-") or arg == "-":
            if file is not None:
                return None
            file = arg
        elif name in _FLAGS and not eq:
            flags.add(_FLAGS[name])
        elif name in _VALUED:
            value = inline if eq else next(rest, None)
            if value is None or not _take(values, _VALUED[name], value):
                return None
        else:
            return None
    if not file:
        return None
    state = values.get("state")
    if state is None:  # click reads $RUNNER_STATE for --state; an empty one is no override
        state = os.environ.get("RUNNER_STATE") or None
    return Args(file, values["param"], values.get("item"), state, "json" in flags)


def _take(values: dict[str, Any], key: str, value: str) -> bool:
    if key == "param":
        if "=" not in value:
            return False  # click's path refuses it with its message
        k, v = value.split("=", 1)
        values["param"][k.strip()] = v
        return True
    if key == "jobs":
        return value.isascii() and value.isdigit() and int(value) >= 1
    if key in values:
        return False  # given twice: click's rules decide
    values[key] = value
    return True


def noop_report(
    state_path: Path,
    pipeline_path: Path,
    overrides: dict[str, str],
    item: str | None,
    *,
    file: Path | None = None,
) -> dict[str, Any] | None:
    """Journal a fully cached run when the fingerprint holds and return apply's --json
    document; None when the full path must answer. With ``file``, a pipeline changed only in
    values no key depends on is checked against the schema first (raises InvalidPipeline);
    without it such a change is left to the full path. Raises Busy when the item is locked."""
    from ...engine.plan import fastpath

    held = fastpath.check(state_path, pipeline_path, overrides, item)
    if held is not None and "validate" in held:
        if file is None:
            return None
        from ...pipeline.loader import load_document

        load_document(file)
        fastpath.validated(state_path, pipeline_path, overrides, item, held)
    if held is None:
        return None
    from ...engine.plan import noopjournal

    return noopjournal.journal(state_path, pipeline_path, held)


def noop_line(noop: dict[str, Any]) -> str:
    """The line `runner apply` prints for a no-op."""
    from ..counts import Tally, tally_text

    done = tally_text(Tally.of_steps_json(noop["steps"]), ("cached",)) or "nothing to do"
    return f"completed: {done}  (run {noop['run']['id']}; nothing changed)"


def answer(argv: list[str]) -> int | None:
    """Answer `runner apply` for an unchanged pipeline without the command group; returns the
    exit status, or None to let the full command answer (it decides everything again)."""
    args = parse(argv)
    if args is None:
        return None
    from ...engine.run.locate import state_dir_for

    try:
        file = Path(args.file)
        state_path = state_dir_for(file, args.state)
        noop = noop_report(state_path, file.resolve(), args.params, args.item)
    except Exception:  # the full command meets it again and reports it: nothing was journaled
        return None  # (noopjournal's transaction commits as its last statement)
    if noop is None:
        return None
    from ...source.termtext import write_line

    if args.as_json:
        write_line(json.dumps(noop, ensure_ascii=False, default=str, allow_nan=False), as_json=True)
    else:
        write_line(noop_line(noop))
    return 0
