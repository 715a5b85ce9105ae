"""Prompt-version commands: `runner prompts lock|check`."""

from __future__ import annotations

from pathlib import Path

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
    drifts the edit is set aside (kept, reported) and the step regenerates.

    Example: runner edit RUN detail --element 2 --from fixed.txt
    """
    import json
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
