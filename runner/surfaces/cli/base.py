"""What the commands share: the `runner` click group, its error handling, the common options and
`--json` output. Command modules import it; app.py imports them (so none imports app)."""

from __future__ import annotations

import gc
import io
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from ... import __version__
from ...engine.run.locate import STATE_HELP
from ...errors import UsageError
from .applyrun import Printer
from .failures import cwd_exists
from .termtext import echo, echo_block, json_line
from .termtext import isatty_stderr as isatty_stderr

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class Ctx:
    """Shared CLI state, carried in click's context object."""

    state: str | None = None
    json: bool = False
    # The `runner` process itself (entry.py), not CliRunner or a library caller: a command may
    # then change what is the whole interpreter's (its garbage collector), as it owns it.
    console: bool = False


def emit_json(doc: dict[str, Any]) -> None:
    """One JSON document on stdout: exact data, nothing a terminal acts on (see ``safe_json``)."""
    click.echo(json_line(doc))


# How the commands print (applyrun.run_apply and failures.report take a Printer: the quick
# apply, read before click loads, gives them one that prints the same without click).
CLICK_PRINTER = Printer(echo, echo_block, emit_json)


# The modules that register commands, in the order a name is looked for: `runner apply` imports
# commands_core only (the other modules' imports are ~10 ms of every start-up); --help, a name
# not found so far, and `from runner.surfaces.cli.app import cli` import them all. Command
# modules import what they share from here (or openstate), never from one another.
COMMAND_MODULES = ("commands_core", "commands_plan", "commands_records")
OPTIONAL_COMMAND_MODULES = (
    "commands_thumb",
    "commands_review",
    "commands_cards",
    "commands_watch",
    "commands_render",
    "commands_providers",
    "commands_serve",
    "commands_cache",
    "commands_server",
)


def load_commands(until: Callable[[], bool] = lambda: False) -> None:
    """Import the command modules in order (each registers its commands on import), stopping
    once ``until()`` holds; an optional module left out of this install is skipped."""
    import importlib

    for name in (*COMMAND_MODULES, *OPTIONAL_COMMAND_MODULES):
        if until():
            return
        try:
            importlib.import_module(f"runner.surfaces.cli.{name}")
        except ModuleNotFoundError as exc:
            if name in COMMAND_MODULES or exc.name != f"runner.surfaces.cli.{name}":
                raise


class LazyGroup(click.Group):
    """A group whose commands are registered by the command modules, imported when asked for."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            load_commands(until=lambda: cmd_name in self.commands)
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        load_commands()
        return super().list_commands(ctx)


class RunnerGroup(LazyGroup):
    """Turns library errors into one clear message and their exit code, in one place."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **kwargs: Any,
    ) -> Any:
        """click's standalone main, but its own messages (a bad choice, an unknown option quote
        the argument) are printed through termtext like everything else."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **kwargs)
        from .termtext import echo, echo_block

        try:
            rv = super().main(args, prog_name, complete_var, False, **kwargs)
        except click.ClickException as exc:
            shown = io.StringIO()
            exc.show(file=shown)
            echo_block(shown.getvalue(), err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        _utf8_args(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            cwd_exists()
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt):
            raise
        except BrokenPipeError:  # `runner ... | head`: the reader left, nothing to report
            sys.stderr.close()
            ctx.exit(0)
        except SystemExit:
            raise
        except Exception as exc:
            from .failures import report

            as_json = "--json" in sys.argv[1:] or (isinstance(ctx.obj, Ctx) and ctx.obj.json)
            ctx.exit(report(exc, as_json, CLICK_PRINTER))


def _utf8_args(args: list[str]) -> None:
    """Arguments are UTF-8 text: a byte that is not arrives as a lone surrogate (U+DC80-DCFF),
    which no journal, JSON document or terminal can carry. Refused here, once, with exit 2;
    -p values are left to the pipeline's reader, which names the param and its declaration."""
    after_p = False
    for arg in args:
        param = after_p or arg.startswith(("-p", "--param="))
        after_p = arg in ("-p", "--param")
        bad = None if param else _SURROGATE.search(arg)
        if bad is not None:
            from .termtext import safe

            raise click.UsageError(
                f"the argument '{safe(arg)}' is not UTF-8 text (byte "
                f"0x{ord(bad.group(0)) - 0xDC00:02x}): runner reads arguments, paths included, "
                "as UTF-8"
            )


_SURROGATE = re.compile("[\ud800-\udfff]")


def json_option(fn: F) -> F:
    def set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
        if value:
            ctx.ensure_object(Ctx).json = True
        return value

    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        expose_value=True,
        callback=set_json,
        help="Print one JSON document (with exit_code) on stdout.",
    )(fn)


def state_option(fn: F) -> F:
    return click.option(
        "--state",
        "state_dir",
        type=click.Path(file_okay=False),
        default=None,
        envvar="RUNNER_STATE",
        help=STATE_HELP,
    )(fn)


def max_cost_option(fn: F) -> F:
    return click.option(
        "--max-cost",
        type=click.FloatRange(min=0),
        default=None,
        help="Budget: refuse when the estimated provider cost exceeds it (runner.toml [prices]).",
    )(fn)


def reask_option(fn: F) -> F:
    # apply's and plan's (with apply --dry-run): a flag that changes what runs is on both
    return click.option(
        "--reask",
        multiple=True,
        metavar="GATE",
        help="Ask GATE again, though a decision was made before on the same inputs (an "
        "approval, a rejection or a revision is otherwise given again).",
    )(fn)


def retry_uncertain_option(fn: F) -> F:
    return click.option(
        "--retry-uncertain",
        is_flag=True,
        help="Send again provider calls whose reply was lost, and start again a repeat_safe: "
        "false body never seen to end (the backend may have completed and billed them: this "
        "may pay twice).",
    )(fn)


def param_option(fn: F) -> F:
    return click.option(
        "-p",
        "--param",
        "params",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override a param (value parsed as YAML, checked by type).",
    )(fn)


def jobs_option(fn: F) -> F:
    return click.option(
        "--jobs",
        "-j",
        type=click.IntRange(min=1),
        default=None,
        help="CPU work at once: commands running, step bodies (default: number of cores); "
        "waiting on a provider holds none.",
    )(fn)


def events_option(fn: F) -> F:
    return click.option(
        "--events",
        "events_file",
        type=click.Path(dir_okay=False),
        default=None,
        help="Append every event as a JSON line to this file.",
    )(fn)


def parse_params(pairs: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        if "=" not in pair:
            raise UsageError(f"-p expects KEY=VALUE, got '{pair}'")
        k, v = pair.split("=", 1)
        out[k.strip()] = v
    return out


def pipeline_arg(fn: F) -> F:
    return click.argument("file", type=click.Path(dir_okay=False, path_type=Path))(fn)


@click.group(cls=RunnerGroup, context_settings={"help_option_names": ["-h", "--help"]})
# The version is the package's own (runner.__version__, which pyproject.toml reads too), not the
# installed distribution's metadata: the distribution is named runner-pipelines, and a source
# tree on sys.path has no metadata at all.
@click.version_option(version=__version__, prog_name="runner")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """runner: declarative, journaled pipelines for generative-AI production work.

    Example: runner apply pipelines/thumbnail.yaml -p video_id=dQw4w9WgXcQ
    """
    obj = ctx.ensure_object(Ctx)
    if obj.console and ctx.invoked_subcommand != "apply":
        gc.enable()  # off for start-up (entry.py); apply turns it on as its run starts


@cli.group(cls=LazyGroup)
def runs() -> None:
    """Inspect runs in the journal.

    Example: runner runs list --limit 10
    """
