"""How a command's error is reported, in one place: the command group's (base.RunnerGroup) and
the quick apply's (quickapply.py, before click loads). Library errors become one clear message
and their exit code; a bug prints its traceback."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

from ...errors import RunnerError, StoreError, UsageError

if TYPE_CHECKING:
    from .applyrun import Printer


def report(exc: Exception, as_json: bool, out: Printer) -> int:
    """Print ``exc`` as runner reports an error (with ``as_json`` its JSON document first) and
    return the exit status."""
    if isinstance(exc, RunnerError):
        if as_json:
            out.json({"error": exc.to_json(), "exit_code": exc.exit_code})
        from .termtext import safe  # a message may quote an id, a param, a reply

        out.block(f"error: {safe(exc, lines=True)}", err=True)
        return exc.exit_code
    from ...state.canonical import CanonicalError

    if isinstance(exc, CanonicalError):  # a value JSON cannot carry met a record: the
        refused = UsageError(f"{exc}; nothing was recorded")  # input said it, not a bug
        if as_json:
            out.json({"error": refused.to_json(), "exit_code": refused.exit_code})
        out.line(f"error: {refused}", err=True)
        return refused.exit_code
    if isinstance(exc, OSError) and exc.filename and exc.strerror:
        # a path the system refused (the state on /dev/null, a directory with no
        # access): the environment's answer, not a bug in runner
        out.line(f"error: {exc.filename}: {exc.strerror}", err=True)
        return 1
    damaged = journal_damage(exc)
    if damaged is not None:  # a page or table SQLite cannot read, met mid-command
        if as_json:
            out.json({"error": damaged.to_json(), "exit_code": damaged.exit_code})
        out.line(f"error: {damaged}", err=True)
        return damaged.exit_code
    import traceback  # only for a bug: ~1.5 ms of every start-up otherwise

    out.block(traceback.format_exc(), err=True)  # its messages may quote data
    out.line("runner hit a bug (the traceback is above); please report it.", err=True)
    return 1


def journal_damage(exc: Exception) -> RunnerError | None:
    """A StoreError for SQLite's "malformed", "not a database" or "no such table" errors, and
    for JSON that does not parse: runner's own documents it reads back are journal records
    (input files and -p values have their own errors), so one cut off means a damaged record."""
    from ...state.records import REPAIR_HINT, is_damage

    if isinstance(exc, json.JSONDecodeError):
        return StoreError(
            f"a journal record cannot be read back (bad JSON: {exc}); the journal may be damaged",
            hint=REPAIR_HINT,
        )
    sqlite3 = sys.modules.get("sqlite3")  # not imported at start-up for this
    if sqlite3 is None or not isinstance(exc, sqlite3.DatabaseError):
        return None

    if "disk is full" in str(exc):  # a write outside an apply's batches (the run is not
        return StoreError(  # marked: the next apply marks it interrupted)
            f"the disk holding the journal is full: {exc}",
            hint="free some space (or copy the project to a bigger disk), then try again",
        )
    if not is_damage(exc):
        return None
    return StoreError(f"the journal is damaged: {exc}", hint=REPAIR_HINT)


def cwd_exists() -> None:
    """Raise UsageError when the working directory is gone: relative paths (the pipeline, the
    state dir) resolve against it; without it they cannot."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise UsageError(
            "the current directory no longer exists (deleted or moved); cd to a real one"
        ) from None
