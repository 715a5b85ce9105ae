"""``exec``: a shell command in the pipeline root; exit status 0 passes.

The command runs with /bin/sh in its own process group, so on a timeout the whole group
(background children included) is killed, and no process it started outlives the check.
Values of ``${{ }}`` inside ``run`` reach the command through its environment, as in the shell
step (runner/expr/shellenv.py): the shell never parses a value.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ...errors import InvalidPipeline, Location
from ...source.paths import inside, real_below
from .. import Compiled, evaluate_value
from ..commandscope import command_scope
from ..values import as_text
from .base import CheckType, Path_, Rule, Scope, Verdict, register_check

# The shell's grammar (shellenv, shellquote, shlex) loads with the first exec check compiled:
# importing the registered checks costs a pipeline with none of them nothing (~3 ms).
if TYPE_CHECKING:
    from ..confined import Confinement
    from ..shellenv import Script

DEFAULT_TIMEOUT = 60.0
TAIL_CHARS = 400
_KEEP_BYTES = 64 * 1024


def _tail(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace").strip()
    return text if len(text) <= TAIL_CHARS else "…" + text[-TAIL_CHARS:]


class ExecRule(Rule):
    kind = "exec"
    is_sync = False

    def __init__(
        self,
        run: Compiled,
        env: Compiled,
        timeout: float,
        *,
        raw: Any,
        where: Location | None,
        raw_shell: bool = False,
        pass_env: tuple[str, ...] = (),
        inputs: tuple[str, ...] = (),
        script: str | None = None,
    ) -> None:
        super().__init__(raw=raw, where=where)
        self.raw_shell = raw_shell
        self.pass_env = pass_env
        self.run = run
        self.env = env
        self.timeout = timeout
        self.inputs = inputs
        self.script = script

    def own_values(self) -> Iterable[Compiled]:
        return (self.run, self.env)

    def own_files(self) -> dict[str, bool]:
        # The declared inputs must exist; the script the command names is keyed while it does
        # (a command that copes with its absence, `sh x.sh || true`, still runs without it).
        found: dict[str, bool] = {}
        if self.script is not None:
            found[self.script] = False
        found.update(dict.fromkeys(self.inputs, True))
        return found

    def _confinement(self, root: Path) -> Confinement | None:
        """What the command may read: the files its step's key names and the step wrote, and
        the check's own (its ``inputs:`` and script); no project file written; the network
        only when its step says so. None: the step said ``sandbox: false``."""
        scope = command_scope.get()
        if not scope.sandbox:
            return None
        from ..confined import Confinement

        real_root = os.path.realpath(root)
        own = (*scope.files, *self.inputs, *((self.script,) if self.script else ()))
        read = tuple(real_below(real_root, rel) for rel in dict.fromkeys(own))
        return Confinement(real_root, read=read, network=scope.network)

    def command(self, context: Mapping[str, Any]) -> Script:
        """The script that runs, every expression's value by environment. Raises Unquotable
        (a value with a NUL byte)."""
        from ..shellenv import script_command

        return script_command(self.run, context, raw=self.raw_shell)

    async def _check_async(self, context: Mapping[str, Any], root: Path) -> Verdict:
        from ..shellquote import Unquotable
        from ..shellrun import run_shell  # asyncio loads when a check runs, not to validate

        try:
            script = self.command(context)
        except Unquotable as exc:
            return Verdict(False, [f"exec: {exc.reason}"], error=True)
        from ...source.secretenv import command_environment
        from ...source.secretnames import provider_env_names

        own = {k: as_text(v) for k, v in evaluate_value(self.env, context).items()}
        env = command_environment(own, pass_env=self.pass_env, named=provider_env_names(root))
        env.update(script.values)  # check_names keeps the user's own names apart
        command = script.text
        shown = command if len(command) <= 80 else command[:79] + "…"
        confine = self._confinement(root)
        try:
            done = await run_shell(
                command, cwd=root, env=env, timeout=self.timeout, keep=_KEEP_BYTES, confine=confine
            )
        except OSError as exc:
            return Verdict(False, [f"exec: `{shown}` could not start: {exc}"], error=True)
        stdout, stderr, timed_out = done.stdout, done.stderr, done.timed_out
        output = _tail(stderr) or _tail(stdout)
        refused = False  # a file the sandbox refused: the pipeline's mistake, not the output's
        if confine is not None and done.code not in (0, None):
            from ..refused import say_refused, undeclared

            found = undeclared(stderr, cwd=confine.root, root=confine.root, declared=confine.read)
            if found:
                refused = True
                said = say_refused(found).replace("the step's inputs", "the check's inputs")
                output = f"{output} ({said})" if output else said
        stream = "stderr" if _tail(stderr) else "stdout"
        detail = f"; {stream}: {output}" if output else ""
        if timed_out:
            return Verdict(
                False,
                [
                    f"exec: `{shown}` timed out after {self.timeout:g} s "
                    f"(its process group was killed){detail}"
                ],
            )
        if done.code != 0:
            # (refused: cannot be evaluated; a `when:` fails its step rather than skip it)
            reason = f"exec: `{shown}` exited with {done.code}{detail}"
            return Verdict(False, [reason], error=refused)
        return Verdict(True)


# Interpreters whose first operand is the script they run, with the options that take their
# code from the command line instead (then no file is run).
_INTERPRETERS: dict[str, frozenset[str]] = {
    **dict.fromkeys(("sh", "bash", "dash", "zsh", "ksh"), frozenset({"-c"})),
    **dict.fromkeys(("python", "python3"), frozenset({"-c", "-m"})),
    "node": frozenset({"-e", "-p", "--eval", "--print"}),
    **dict.fromkeys(("perl", "ruby"), frozenset({"-e", "-E"})),
    "Rscript": frozenset({"-e"}),
}
_OPERATORS = frozenset("|&;<>()")


def script_of(run: str) -> str | None:
    """The project file the command runs, when its first simple command says so plainly:
    ``sh check.sh``, ``python3 -u tools/check.py``, ``./check.sh`` (a word before any
    ``${{ }}``, operator or redirection, relative, with no shell expansion in it). None
    otherwise: what a command reads beyond that is for ``inputs:`` to declare."""
    import shlex

    head = run.split("${{", 1)[0]
    lexer = shlex.shlex(head, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # an unclosed quote: cut at the expression, or a command not plain
        return None
    simple: list[str] = []
    for word in words:
        if set(word) <= _OPERATORS:
            break
        simple.append(word)
    if not simple:
        return None
    first, rest = simple[0], simple[1:]
    if "/" in first:  # ./check.sh, tools/check: runs the file itself
        return _plain_path(first)
    code_flags = _INTERPRETERS.get(os.path.basename(first))
    if code_flags is None:
        return None
    for word in rest:
        if word in code_flags:
            return None  # the code is on the command line
        if word.startswith("-"):
            continue
        return _plain_path(word)
    return None


def _plain_path(word: str) -> str | None:
    """A relative path with nothing the shell would expand, else None."""
    if not word or word.startswith(("/", "~")) or any(c in word for c in "$`*?[{="):
        return None
    return os.path.normpath(word)


class Exec(CheckType):
    name = "exec"
    description = (
        "Runs a command with /bin/sh in the pipeline root (own process group); passes "
        "on exit status 0. The reason of a failure holds the exit status and the end of stderr."
    )
    schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["run"],
        "additionalProperties": False,
        "properties": {
            "run": {
                "type": "string",
                "minLength": 1,
                "description": "The shell command; values of ${{ }} inside it reach it as "
                "environment variables it expands, quoted where they stand (bare, in '...', "
                'in "...").',
            },
            "raw": {
                "type": "boolean",
                "default": False,
                "description": "Paste ${{ }} values into run as shell text, unquoted; "
                "`runner check` reports it.",
            },
            "pass_env": {
                "type": "array",
                "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                "description": "Variables of runner's environment the command is given "
                "besides the base set (PATH, HOME, USER, LOGNAME, SHELL, TMPDIR, TZ, TERM, "
                "LANG, LANGUAGE, LC_*); nothing else of it reaches the command, and a secret "
                "named here is masked wherever it shows.",
            },
            "timeout": {
                "type": "number",
                "exclusiveMinimum": 0,
                "default": DEFAULT_TIMEOUT,
                "description": "Seconds before the command's whole process group is "
                "killed and the check fails.",
            },
            "env": {
                "type": "object",
                "additionalProperties": {"type": ["string", "number", "boolean"]},
                "description": "Extra environment variables (values may be ${{ }}).",
            },
            "inputs": {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "description": "Files the command reads, relative to the root: part of the "
                "step's key, so editing one runs the step and its checks again (the script "
                "the command runs, `sh check.sh`, is found without being listed).",
            },
        },
    }

    def compile(self, args: Any, scope: Scope, path: Path_) -> Rule:
        from ..shellenv import check_names
        from ..shellquote import check_command

        raw_shell = args.get("raw", False)
        if not isinstance(raw_shell, bool):
            raise InvalidPipeline("exec: raw must be true or false", where=scope.where(path))
        check_command(args["run"], raw=raw_shell, where=scope.where((*path, "run")))
        env_names = args.get("env") if isinstance(args.get("env"), dict) else {}
        check_names(args["run"], env_names, args.get("pass_env") or (), scope.where(path))
        inputs: list[str] = []
        for i, rel in enumerate(args.get("inputs") or ()):
            try:
                inside(scope.root, rel)
            except InvalidPipeline as exc:
                raise scope.error(f"exec: inputs: {exc.message}", (*path, "inputs", i)) from None
            inputs.append(os.path.normpath(rel))
        script = script_of(args["run"])
        if script is not None:
            try:
                inside(scope.root, script)
            except InvalidPipeline:
                script = None  # outside the project: the environment's, not an input
        return ExecRule(
            scope.value(args["run"], (*path, "run")),
            scope.value(args.get("env", {}), (*path, "env")),
            float(args.get("timeout", DEFAULT_TIMEOUT)),
            raw=args,
            where=scope.where(path),
            raw_shell=raw_shell,
            pass_env=tuple(args.get("pass_env") or ()),
            inputs=tuple(inputs),
            script=script,
        )


register_check(Exec())
