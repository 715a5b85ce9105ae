"""`shell`: run a command with /bin/sh in the pipeline's directory; declared files in and out."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import Location, StepFailure
from ..expr.shellenv import check_names
from ..expr.shellenv import command as shell_command
from ..expr.unquotable import Unquotable
from ..expr.values import as_text
from ..source.paths import check_inside, inside, real_below
from ..source.secretenv import command_environment
from .base import StepContext, StepResult, StepType, invalid

if TYPE_CHECKING:
    from ..expr.confined import Confinement

INLINE_LIMIT = 64 * 1024


def _inside_now(real_root: str, rel: str) -> str:
    """``rel``'s real path under the root (whose real path is ``real_root``) as the disk is now;
    earlier steps (or this command) may have replaced a directory on its path with a symlink
    pointing out of the root. (pipeline.paths.inside_now, as a string: a Path costs more than
    the walk, twice an output.)"""
    path = real_below(real_root, rel)
    if path != real_root and not path.startswith(real_root.rstrip(os.sep) + os.sep):
        raise StepFailure(
            f"declared output {rel} lies outside the root (a directory on its path is a symlink "
            "pointing out)"
        )
    return path


def _confinement(
    ctx: StepContext, args: Mapping[str, Any], real_root: str, targets: Mapping[str, str]
) -> tuple[Confinement | None, dict[str, tuple[int, int, int]]]:
    """What the command may touch (None: the step said `sandbox: false`), and the declared
    outputs made empty for it: Landlock grants a file only once it exists, so an output at the
    project's top that the command is to make is made first (and removed again when the
    command did not write it). The files of an output's directory below the project's top may
    be made, read, written, replaced and removed (a tool writes a temporary file beside its
    output, reads it back, renames it over the output; Landlock cannot grant only the files a
    command makes, so the others there are readable too: docs/steps.md): that grant lets the
    command make its outputs there, so none is made for it (a create on the event loop's
    thread, ~15% of a fan-out's loop)."""
    if not ctx.sandbox:
        return None, {}
    from ..expr.confined import Confinement, status

    if not status().confines:
        return None, {}
    read = [_inside_now(real_root, rel) for rel in args.get("inputs") or []]
    made: dict[str, tuple[int, int, int]] = {}
    for path in targets.values():
        if os.path.dirname(path) != real_root:
            continue  # in one of write_dirs below
        if not os.path.lexists(path):
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
                st = os.stat(path)
                made[path] = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    dirs = {os.path.dirname(p) for p in targets.values()} - {real_root}
    confine = Confinement(
        real_root,
        read=tuple(read),
        write=tuple(targets.values()),
        write_dirs=tuple(sorted(dirs)),
        network=ctx.network,
    )
    return confine, made


def _unmade(made: Mapping[str, tuple[int, int, int]]) -> None:
    """Remove the outputs made empty for the command that it never wrote (same file, same
    times, still empty): it did not produce them."""
    for path, (ino, mtime, ctime) in made.items():
        with contextlib.suppress(OSError):
            st = os.stat(path)
            if (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size) == (ino, mtime, ctime, 0):
                os.unlink(path)


def _refusals(confine: Confinement | None, err: bytes) -> str:
    """What the sandbox refused the command, as the files to declare (empty: nothing named)."""
    if confine is None:
        return ""
    from ..expr.refused import say_refused, undeclared

    declared = (*confine.read, *confine.write)
    refused = undeclared(err, cwd=confine.root, root=confine.root, declared=declared)
    return f" ({say_refused(refused)})" if refused else ""


class ShellStep(StepType):
    name = "shell"
    runs_anywhere = True  # a Dask worker may run it (engine/run/executors.py)
    version = "1"
    description = "Run a command with /bin/sh in the pipeline's directory."
    key_neutral: ClassVar[Mapping[str, str]] = {
        "script": "made by runner from `run` (not written by a user): the script that runs, its "
        "${{ }} values by environment; `run`, keyed, holds the same values quoted in",
    }
    output_doc: ClassVar[dict[str, str]] = {
        "exit_code": "integer: the command's exit status (0: a non-zero one fails the step)",
        "stdout": "string: its standard output (the first 64 KiB)",
        "stderr": "string: its standard error (the first 64 KiB)",
        "stdout_object": "string: the whole output's object digest, when longer than 64 KiB",
        "stderr_object": "string: the same for standard error",
        "files": "mapping: each declared output path to its object digest",
    }
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["run"],
        "properties": {
            "run": {
                "type": "string",
                "description": "The command, run with /bin/sh -c. Each ${{ }} in it reaches "
                "the command as an environment variable the script expands, quoted, where the "
                "value stands: the shell never parses a value.",
            },
            "inputs": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Files whose content is part of the key.",
            },
            "outputs": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Files the command must produce; stored content-addressed.",
            },
            "env": {
                "type": "object",
                "additionalProperties": {"type": ["string", "number", "boolean", "null"]},
                "description": "Extra environment variables. A value that is not a string "
                "becomes text as it would inside a string: true/false, a number as written, "
                "null as empty, a list or an object (from an expression) as JSON.",
            },
            "pass_env": {
                "type": "array",
                "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                "description": "Variables of runner's environment the command is given "
                "besides the base set (PATH, HOME, USER, LOGNAME, SHELL, TMPDIR, TZ, TERM, "
                "LANG, LANGUAGE, LC_*); nothing else of it reaches the command, and a secret "
                "named here is masked wherever it shows.",
            },
            "raw": {
                "type": "boolean",
                "default": False,
                "description": "Paste ${{ }} values into run as shell text, unquoted (they "
                "otherwise reach it by environment); `runner check` reports it.",
            },
        },
    }

    def validate(self, args: Mapping[str, Any], *, root: Path, where: Location | None) -> None:
        if not isinstance(args.get("raw", False), bool):
            raise invalid("raw must be true or false, written as such (not an expression)", where)
        if isinstance(args.get("run"), str) and "${{" in args["run"]:
            from ..expr.shellquote import check_command  # the scanner, only for values

            check_command(args["run"], raw=args.get("raw") is True, where=where)
        env, pass_env = args.get("env"), args.get("pass_env")
        check_names(
            args.get("run"),
            env if isinstance(env, dict) else (),
            pass_env if isinstance(pass_env, list) else (),
            where,
        )
        for field in ("inputs", "outputs"):
            for i, rel in enumerate(args.get(field) or []):
                if isinstance(rel, str) and "${{" not in rel:
                    check_inside(root, rel, where=where)
                elif not isinstance(rel, str):
                    raise invalid(f"{field}[{i}] must be a path", where)

    def evaluate(self, compiled: Any, context: Mapping[str, Any]) -> Any:
        if not isinstance(compiled, dict) or "run" not in compiled:
            return super().evaluate(compiled, context)
        raw = compiled.get("raw") is True
        args = {}
        for name, value in compiled.items():
            if name != "run":
                args[name] = super().evaluate(value, context)
                continue
            try:
                args[name], script = shell_command(value, context, raw=raw)
            except Unquotable as exc:
                raise StepFailure(f"run: {exc.reason}") from None
            if script.values:  # the key is made of `run` (values quoted in, as before)
                args["script"] = script.to_json()
        return args

    def produces(self, args: Mapping[str, Any]) -> list[str]:
        return [p for p in args.get("outputs") or [] if isinstance(p, str) and "${{" not in p]

    def reads(self, args: Mapping[str, Any], *, root: Path) -> list[str]:
        for rel in args.get("inputs") or []:
            inside(root, rel)
        return list(args.get("inputs") or [])

    async def run(self, ctx: StepContext, args: dict[str, Any]) -> StepResult:
        outputs = [str(p) for p in args.get("outputs") or []]
        # The root's real path is walked once per execution, for the checks before and after
        # the command; each output's own path is still resolved afresh both times.
        real_root = os.path.realpath(ctx.root)
        targets = {rel: _inside_now(real_root, rel) for rel in outputs}
        for path in targets.values():
            parent = os.path.dirname(path)
            if not os.path.isdir(parent):  # a stat; mkdir of an existing dir raises
                os.makedirs(parent, exist_ok=True)
        own = {str(k): as_text(v) for k, v in (args.get("env") or {}).items()}
        env = command_environment(
            own,
            pass_env=args.get("pass_env") or (),
            named=ctx.env.secret_names,
        )
        from ..expr.shellrun import run_shell  # asyncio: not needed to validate a pipeline

        script = args.get("script") or {"script": args["run"], "values": {}}
        env.update(script["values"])  # check_names keeps the user's own names apart
        confine, made = _confinement(ctx, args, real_root, targets)
        try:
            done = await run_shell(script["script"], cwd=ctx.root, env=env, confine=confine)
        except OSError as exc:  # no /bin/sh, no process left, the sandbox's spawner refused
            raise StepFailure(f"the command could not start: {exc}") from None
        finally:
            _unmade(made)
        code, out, err = done.code, done.stdout, done.stderr
        output: dict[str, Any] = {"exit_code": code, "files": {}}
        artifacts: list[str] = []
        for name, data in (("stdout", out), ("stderr", err)):
            if len(data) <= INLINE_LIMIT:
                output[name] = data.decode("utf-8", errors="replace")
            else:
                digest = ctx.objects.put_bytes(data)
                artifacts.append(digest)
                output[name] = data[:INLINE_LIMIT].decode("utf-8", errors="replace")
                output[f"{name}_object"] = digest
        if code != 0:
            tail = err.decode("utf-8", errors="replace").strip().splitlines()[-5:]
            detail = (": " + " | ".join(tail)) if tail else ""
            raise StepFailure(f"command exited with {code}{detail}{_refusals(confine, err)}")
        files: dict[str, str] = {}
        for rel in targets:
            path = _inside_now(real_root, rel)  # the command may swap a directory
            if not os.path.isfile(path):
                raise StepFailure(f"declared output {rel} was not produced")
            files[rel] = ctx.objects.put_file(path)
        output["files"] = dict(files)
        return StepResult(output=output, artifacts=artifacts, files=files)
