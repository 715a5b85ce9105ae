"""Prompt-version and edit commands: `runner prompts lock|check`, `runner edit`, `runner edits
list|drop`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from .base import cli, emit_json, json_option, state_option
from .termtext import echo


@cli.group()
def prompts() -> None:
    """Published prompt versions (prompts/<family>/<version>/) and their lock file.

    Example: runner prompts lock
    """


@prompts.command("lock")
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    help="Project root holding prompts/.",
)
@json_option
def prompts_lock(root: Path, as_json: bool) -> None:
    """Record every versioned prompt directory's content hash in prompts.lock.

    Example: runner prompts lock --root .
    """
    from ...pipeline.prompt_lock import write_lock

    path, versions = write_lock(root.resolve())
    if as_json:
        emit_json({"lock": str(path), "versions": sorted(versions), "exit_code": 0})
    else:
        from ...source.termtext import shown_path

        counted = f"{len(versions)} prompt version{'' if len(versions) == 1 else 's'}"
        echo(f"locked {counted} in {shown_path(path)}")


@prompts.command("check")
@click.option(
    "--root", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True
)
@json_option
def prompts_check(root: Path, as_json: bool) -> None:
    """Fail (exit 2) when a locked prompt version's content changed.

    Example: runner prompts check
    """
    from ...pipeline.prompt_lock import LOCK_NAME, enforce

    lock = root.resolve() / LOCK_NAME
    if not lock.is_file():  # nothing is locked here: say so, not "they match"
        if as_json:
            emit_json({"ok": True, "locked": False, "exit_code": 0})
        else:
            from ...source.termtext import shown_path

            folder = shown_path(lock.parent)
            where = "here" if folder == "." else f"in {folder}"
            echo(
                f"no {LOCK_NAME} {where}: no prompt version is locked "
                "(runner prompts lock makes one)"
            )
        return
    enforce(root.resolve())
    if as_json:
        emit_json({"ok": True, "locked": True, "exit_code": 0})
    else:
        echo(f"prompt versions match {LOCK_NAME}")


@cli.command("edit")
@click.argument("run_id")
@click.argument("step")
@click.option("--element", type=int, default=None, help="The for_each element to edit.")
@click.option(
    "--from",
    "from_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Take the edited text from this file instead of $EDITOR.",
)
@state_option
@json_option
def edit_output(
    run_id: str,
    step: str,
    element: int | None,
    from_file: Path | None,
    state_dir: str | None,
    as_json: bool,
) -> None:
    """Correct a step's stored output; later applies reuse the edit while its contract holds.

    The edit is bound to the step's `contract:` (e.g. its prompt card's hash): when the card
    drifts the edit is set aside (kept, reported) and the step regenerates. List edits with
    `runner edits list`; undo one with `runner edits drop STEP`.

    Example: runner edit RUN detail --element 2 --from fixed.txt
    """
    import os
    import shlex
    import subprocess
    import tempfile

    from ...errors import UsageError
    from ...state import overrides
    from ...state.canonical import loads_strict
    from .openstate import open_state

    state = open_state(state_dir, readonly=True)
    try:
        found = overrides.execution_for(
            state.journal, run_id, step, -1 if element is None else element
        )
        execution = found["execution"]
        # A step with no `contract:` records its key as the contract (runner/state/overrides.py).
        bound_to_contract = execution["contract"] not in (None, execution["key"])
        output = json.loads(execution["output"])
        contract = execution["contract"] or execution["key"]
        # A for_each element's edit is of what it is, its item (state/overrides.py)
        identity = (json.loads(execution["key_parts"] or "{}") or {}).get("item")
        # An edit already standing for this output is what the next apply uses: the new text
        # is an edit of that (it was compared with the run's output, so going back to what the
        # run used was "unchanged" and left the other edit in force).
        standing = overrides.active(
            state.journal,
            found["run"]["pipeline"],
            step,
            -1 if element is None else element,
            identity,
        )
        if standing is not None and standing.contract == contract:
            output = standing.output
        textual = isinstance(output, dict) and isinstance(output.get("text"), str)
        current = output["text"] if textual else json.dumps(output, indent=2, ensure_ascii=False)
        if from_file is not None:
            new_text = from_file.read_text(encoding="utf-8")
        else:
            editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
            if not editor:
                raise UsageError("no editor: set $EDITOR, or pass --from FILE")
            with tempfile.NamedTemporaryFile(
                "w", suffix=".txt", delete=False, encoding="utf-8"
            ) as tmp:
                tmp.write(current)
            try:
                subprocess.run([*shlex.split(editor), tmp.name], check=True)
                new_text = Path(tmp.name).read_text(encoding="utf-8")
            except subprocess.CalledProcessError as exc:
                raise UsageError(
                    f"the editor exited with {exc.returncode}; nothing stored"
                ) from None
            finally:
                Path(tmp.name).unlink(missing_ok=True)
        if new_text == current:
            changed, ov = False, None
        else:
            if textual:
                new_output = {**output, "text": new_text}
            else:
                try:  # strict JSON: a NaN would reach the journal (which refuses it)
                    new_output = loads_strict(new_text)
                except ValueError as exc:
                    raise UsageError(f"the edited output is not JSON: {exc}") from None
            overrides.check_shape(step, output, new_output)
            ov = overrides.record(
                state.journal,
                pipeline=found["run"]["pipeline"],
                step_id=step,
                element=-1 if element is None else element,
                contract=contract,
                output=new_output,
                identity=identity,
            )
            changed = True
    finally:
        state.close()
    if as_json:
        emit_json({"changed": changed, "override": ov.to_json() if ov else None, "exit_code": 0})
    elif changed and ov is not None:
        echo(
            f"stored edit #{ov.id} of {step}"
            + (f"[{element}]" if element is not None else "")
            + (
                "; the next apply reuses it while its contract holds"
                if bound_to_contract
                else "; the next apply reuses it while the step's inputs are unchanged (it has"
                " no `contract:`, so its key binds the edit)"
            )
        )
    else:
        echo("no change; nothing stored")


@cli.group()
def edits() -> None:
    """List and undo `runner edit`s of step outputs.

    Example: runner edits drop detail --element 2
    """


def _edit_line(ov: dict[str, Any]) -> str:
    from ...review.gateview import printable, when

    where = ov["step"] + (f"[{ov['element']}]" if ov["element"] is not None else "")
    out = ov["output"]
    text = out["text"] if isinstance(out, dict) and isinstance(out.get("text"), str) else None
    first = (text if text is not None else json.dumps(out, ensure_ascii=False)).strip()
    first = first.splitlines()[0] if first else ""
    first = first[:57] + "..." if len(first) > 60 else first
    reason = f" ({ov['reason']})" if ov["reason"] and ov["status"] != "active" else ""
    return printable(
        f"#{ov['id']:<4} {ov['pipeline']}  {where}  {ov['status'].replace('_', ' ')}{reason}"
        f"  {when(ov['created_at'])}  {first}"
    )


@edits.command("list")
@click.option("--pipeline", default=None, help="Only this pipeline's edits (its name).")
@click.option(
    "--all", "show_all", is_flag=True, help="Also edits superseded by a later one or dropped."
)
@state_option
@json_option
def edits_list(pipeline: str | None, show_all: bool, state_dir: str | None, as_json: bool) -> None:
    """List the edits that answer a step (active) or wait for their contract (set aside).

    Example: runner edits list --pipeline scene-detail --json
    """
    from ...state import overrides
    from .openstate import open_state

    state = open_state(state_dir)
    try:
        found = overrides.list_overrides(state.journal, pipeline, standing_only=not show_all)
    finally:
        state.close()
    rows = [ov.to_json() for ov in found]
    if as_json:
        emit_json({"edits": rows, "exit_code": 0})
    elif not rows:
        echo("no edits" + ("" if show_all else " in force (--all lists superseded and dropped)"))
    else:
        echo("\n".join(_edit_line(r) for r in rows))


@edits.command("drop")
@click.argument("step", required=False)
@click.option("--element", type=int, default=None, help="Only this for_each element's edit.")
@click.option("--id", "edit_id", type=int, default=None, help="The edit's number (edits list).")
@click.option("--pipeline", default=None, help="The pipeline, when STEP is in several.")
@state_option
@json_option
def edits_drop(
    step: str | None,
    element: int | None,
    edit_id: int | None,
    pipeline: str | None,
    state_dir: str | None,
    as_json: bool,
) -> None:
    """Undo the edits of STEP (or edit --id N): the next apply uses the step's own output.

    A dropped edit stays in the journal (`edits list --all`) but never answers again.

    Example: runner edits drop detail --element 2
    """
    from ...engine.plan import fastpath
    from ...errors import UsageError
    from ...state import overrides
    from .openstate import open_state

    if (step is None) == (edit_id is None):
        raise UsageError(
            "name the edit: a STEP or --id N (not both)", hint="see them with: runner edits list"
        )
    state = open_state(state_dir)
    try:
        dropped = overrides.drop(
            state.journal, edit_id=edit_id, step_id=step, pipeline=pipeline, element=element
        )
        # a fingerprint of a run that used the edit would answer the next apply without it
        for name in sorted({ov.pipeline for ov in dropped}):
            fastpath.forget_pipeline(state.dir, name)
    finally:
        state.close()
    if as_json:
        emit_json({"dropped": [ov.to_json() for ov in dropped], "exit_code": 0})
        return
    for ov in dropped:
        where = ov.step_id + (f"[{ov.element}]" if ov.element != -1 else "")
        echo(f"dropped edit #{ov.id} of {where}; the next apply uses the step's own output")
