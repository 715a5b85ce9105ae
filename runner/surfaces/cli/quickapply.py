"""`runner apply` of a plain command line, answered before click is imported.

A steady no-op is start-up and a fingerprint check: click and the command group were a third of
its CPU, and ~5 ms of a run that does work (issue 43). ``answer`` reads a plain command line
itself (the pipeline, -p, --item, --state, --jobs, -q, --json) and runs what the click command
runs (applyrun.run_apply), printing the same bytes and reporting errors in the same words and
exit codes (failures.report). Anything else (another command or option, an odd spelling, a path
click's own checks would refuse, a stream click would re-wrap) is left to the click command,
before anything has been read or written.
"""

from __future__ import annotations

import codecs
import os
import stat
import sys
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
    """A command line ``answer`` runs: `apply FILE` and the options it reads (a plain class: a
    no-op answered here does not import dataclasses, ~5 ms)."""

    __slots__ = ("as_json", "file", "item", "jobs", "params", "quiet", "state")

    def __init__(
        self,
        file: str,
        params: dict[str, str],
        item: str | None,
        state: str | None,
        as_json: bool,
        jobs: int | None = None,
        quiet: bool = False,
    ) -> None:
        self.file = file
        self.params = params
        self.item = item
        self.state = state
        self.as_json = as_json
        self.jobs = jobs
        self.quiet = quiet


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
    return Args(
        file,
        values["param"],
        values.get("item"),
        state,
        "json" in flags,
        values.get("jobs"),
        "quiet" in flags,
    )


def _take(values: dict[str, Any], key: str, value: str) -> bool:
    if key == "param":
        if "=" not in value:
            return False  # click's path refuses it with its message
        k, v = value.split("=", 1)
        values["param"][k.strip()] = v
        return True
    if key == "jobs":  # given twice, the last one counts (as click reads it)
        if not (value.isascii() and value.isdigit() and int(value) >= 1):
            return False
        values["jobs"] = int(value)
        return True
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


def _click_takes_them(args: Args) -> bool:
    """Whether click's checks of the pipeline and --state paths (click.Path: FILE not a
    directory, the state not a file, each readable when it exists) would pass them."""
    for path, not_kind in ((args.file, stat.S_ISDIR), (args.state, stat.S_ISREG)):
        if path is None:
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue  # not there: click takes it, the command says what is missing
        if not_kind(st.st_mode) or not os.access(path, os.R_OK):
            return False
    return True


def _streams_as_click_has_them() -> bool:
    """Whether click.echo would write to stdout and stderr as they are: each there, with an
    encoding that is not ASCII (click re-wraps such a stream)."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        if stream is None or encoding is None:
            return False
        try:
            if codecs.lookup(encoding).name == "ascii":
                return False
        except LookupError:
            return False
    return True


def answer(argv: list[str]) -> int | None:
    """Run `runner apply` for a plain command line without the command group: prints what it
    prints and returns its exit status (or leaves with it: SystemExit); None to let the click
    command answer (nothing was read or written)."""
    args = parse(argv)
    if args is None or not _click_takes_them(args) or not _streams_as_click_has_them():
        return None
    from .applyrun import PLAIN, ApplyRequest, run_apply
    from .failures import cwd_exists, report

    request = ApplyRequest(
        file=Path(args.file),
        overrides=args.params,
        jobs=args.jobs,
        item=args.item,
        quiet=args.quiet,
        state_dir=args.state,
        as_json=args.as_json,
    )
    try:
        cwd_exists()
        run_apply(request, PLAIN, console=True)
    except BrokenPipeError:  # `runner ... | head`: the reader left, nothing to report
        sys.stderr.close()
        return 0
    except (KeyboardInterrupt, EOFError):  # what click's main prints for its Abort
        PLAIN.line("", err=True)
        PLAIN.line("Aborted!", err=True)
        return 1
    except Exception as exc:  # one place words every error (the command group's too)
        return report(exc, args.as_json, PLAIN)
    return 0  # (run_apply leaves with SystemExit)
