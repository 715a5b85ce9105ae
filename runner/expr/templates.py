"""Templates (the ``template`` step, prompt cards): read from the pipeline root only, rendered
in the sandbox under a budget, every failure a TemplateError.

What a render reads is recorded, not predicted: within ``recording_reads()`` every template file
the loader opens (the one rendered, and whatever it includes, imports or extends, by a constant
name or a computed one) is noted with the sha256 of the bytes it was compiled from, so a step's
key can name the files its body actually read (engine/run/recorded.py).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jinja2

from ..errors import InvalidPipeline, Location, TemplateError
from ..source.beneath import OutsideRoot, read_beneath
from ..source.document import decode_utf8
from ..source.paths import inside
from .sandbox import (
    BUDGET,
    MAX_NESTING,
    MAX_RESULT_CHARS,
    MAX_SECONDS,
    MAX_TEMPLATE_CHARS,
    Budget,
    HardenedEnvironment,
    SandboxRefused,
    guard,
    too_deep,
)


def _signature(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


# The reads of the render in progress in this context (None: nobody is recording).
_READS: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "template_reads", default=None
)


@contextlib.contextmanager
def recording_reads() -> Iterator[dict[str, str]]:
    """Record the template files opened within: name (as the root-relative path asked for) ->
    sha256 of the bytes compiled. A template answered from the environment's cache is
    recorded too (its up-to-date check stands for the read)."""
    reads: dict[str, str] = {}
    token = _READS.set(reads)
    try:
        yield reads
    finally:
        _READS.reset(token)


# The digest recorded for a template looked for and not found.
ABSENT = "absent"


def _note(name: str, digest: str) -> None:
    reads = _READS.get()
    if reads is not None:
        reads[name] = digest


class _RootLoader(jinja2.BaseLoader):
    """Loads templates from the pipeline root only.

    ``..`` walks, absolute paths and symlinks that point out are refused (not merely "not
    found"), and so are templates over the size limit.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def get_source(
        self, environment: jinja2.Environment, template: str
    ) -> tuple[str, str, Callable[[], bool]]:
        try:
            path = inside(self.root, template)
        except InvalidPipeline as exc:
            raise SandboxRefused(f"template '{template}': {exc.message}") from None
        if not path.is_file():
            _note(template, ABSENT)  # `ignore missing`: the file appearing changes the render
            raise jinja2.TemplateNotFound(template)
        stat = path.stat()
        if stat.st_size > MAX_TEMPLATE_CHARS:
            raise SandboxRefused(
                f"template '{template}' is over the limit of {MAX_TEMPLATE_CHARS} bytes"
            )
        try:  # as opened now: an earlier step may have swapped a directory on its path
            source = read_beneath(self.root, template)
        except OutsideRoot as exc:
            raise SandboxRefused(f"template '{template}' {exc.strerror}") from None
        text = decode_utf8(source, template)  # InvalidPipeline at the bad byte
        if too_deep(text):
            raise SandboxRefused(f"template '{template}' nests deeper than {MAX_NESTING}")
        digest = hashlib.sha256(source).hexdigest()
        _note(template, digest)

        def uptodate() -> bool:
            # The whole signature, ctime included: a same-size rewrite with its mtime set back
            # keeps (size, mtime), and a long-lived process (watch, serve) would render the old
            # compiled template.
            try:
                same = _signature(os.stat(path)) == _signature(stat)
            except OSError:
                return False
            if same:  # Jinja asks on every load from its cache: this render reads it too
                _note(template, digest)
            return same

        return text, str(path), uptodate


def template_environment(
    root: Path, filters: Mapping[str, Callable[..., Any]] | None = None
) -> HardenedEnvironment:
    """A template environment whose loader reads only inside ``root``; ``filters`` are guarded."""
    env = HardenedEnvironment(loader=_RootLoader(root))
    for name, fn in (filters or {}).items():
        env.filters[name] = guard(fn)
    return env


def render_template(
    env: HardenedEnvironment,
    *,
    name: str | None = None,
    text: str | None = None,
    variables: Mapping[str, Any],
    where: Location | None = None,
    seconds: float = MAX_SECONDS,
) -> str:
    """Render a template file (by name under the root) or inline text, under a budget.

    Raises TemplateError: not found, syntax, undefined variable, or refused by the sandbox
    (path outside the root, too many loop iterations or calls, too long, too large).
    """
    label = name or "<inline>"
    token: contextvars.Token[Budget | None] | None = None
    try:
        if text is not None and (len(text) > MAX_TEMPLATE_CHARS or too_deep(text)):
            raise SandboxRefused(
                f"inline template over {MAX_TEMPLATE_CHARS} characters or {MAX_NESTING} levels"
            )
        tmpl = env.get_template(name) if name is not None else env.from_string(text or "")
        # The budget starts after compiling: parse time of a large template is not an attack.
        token = BUDGET.set(Budget(time.monotonic() + seconds))
        chunks: list[str] = []
        total = 0
        for chunk in tmpl.generate(**variables):
            total += len(chunk)
            if total > MAX_RESULT_CHARS:
                raise SandboxRefused(f"output over the limit of {MAX_RESULT_CHARS} characters")
            chunks.append(chunk)
        out = "".join(chunks)
    except TemplateError:
        raise
    except InvalidPipeline as exc:  # a template file that is not UTF-8, at the bad byte
        raise TemplateError(exc.message, where=exc.where) from None
    except jinja2.TemplateNotFound as exc:
        raise TemplateError(f"template not found: {exc.name}", where=where) from None
    except jinja2.TemplateSyntaxError as exc:
        loc = Location(exc.filename or label, exc.lineno or 0, 1)
        raise TemplateError(f"template syntax error: {exc.message}", where=loc) from None
    except jinja2.UndefinedError as exc:
        raise TemplateError(
            f"template {label}: {exc.message}",
            where=where,
            hint="pass it in `vars:` (templates see only what they are given)",
        ) from None
    except (SandboxRefused, jinja2.exceptions.SecurityError) as exc:
        raise TemplateError(f"template {label} refused: {exc}", where=where) from None
    except RecursionError:
        raise TemplateError(f"template {label} refused: nesting too deep", where=where) from None
    except (
        TypeError,
        ValueError,
        ZeroDivisionError,
        OverflowError,
        AttributeError,
        KeyError,
        IndexError,
        MemoryError,
        jinja2.TemplateError,
    ) as exc:
        raise TemplateError(f"template {label}: {type(exc).__name__}: {exc}", where=where) from None
    finally:
        if token is not None:
            BUDGET.reset(token)
    return out


def template_variables(env: HardenedEnvironment, source: str) -> set[str]:
    """Names a template reads (for compile-time checks of `vars:`)."""
    from jinja2 import meta  # only `runner check` of a template step needs it

    return set(meta.find_undeclared_variables(env.parse(source)))
