"""The step-type interface: what every registered step type implements.

A step body gets plain data (resolved arguments, a handle on the object store, an idempotency
ledger) and returns plain data (a JSON output and the digests of the objects it references).
Nothing in a step body reaches into the journal or the scheduler, so a step can later run in
another process.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Protocol

from ..errors import InvalidPipeline, Location
from ..state.objects import ObjectStore
from .outputshape import Shape, from_doc


class Ledger(Protocol):
    """Idempotency ledger for paid calls: a key is journaled in-flight before the call.

    ``completed(key)`` returns the stored result of a key that finished (never call it again);
    ``record(key)`` the whole record (status, error, attempts, submitted_at, remote_id) or None;
    ``begin(key, meta)`` records it in-flight; ``sent(key)`` notes a request that reached the
    backend and ``remote_id(key, id)`` the backend's job id, both at once (``durable=False``: an
    id that came with the reply, committed with the result recorded next); ``complete(key,
    result)`` records the result; ``fail(key, error, status)`` a failure, where ``status`` is a
    CallStatus value ("failed", or "maybe_executed" when the reply was lost after sending).
    ``note_remote_job(key, job)`` journals the job a job-queue backend runs for the key (before
    waiting on it) and ``remote_job(key)`` returns it, so a later attempt re-attaches to it.

    ``begin``, ``sent`` and ``complete`` may wait to be committed with other calls' records:
    ``await durable()`` returns once they are (``stops=False``: a full disk is not raised here,
    the call's answer is still recorded). A step awaits it after ``begin`` (before the provider
    is called) and after ``complete`` (before the call's log or output says more).
    """

    def completed(self, key: str) -> dict[str, Any] | None: ...

    def record(self, key: str) -> dict[str, Any] | None: ...

    def begin(self, key: str, meta: Mapping[str, Any]) -> None: ...

    def sent(self, key: str) -> None: ...

    async def durable(self, *, stops: bool = True) -> None: ...

    def remote_id(self, key: str, remote_id: str, *, durable: bool = True) -> None: ...

    def complete(self, key: str, result: Mapping[str, Any]) -> None: ...

    def fail(self, key: str, error: str, status: str = "failed") -> None: ...

    def remote_job(self, key: str) -> dict[str, Any] | None: ...

    def note_remote_job(self, key: str, job: Mapping[str, Any] | None) -> None: ...


class BatchAccess(Protocol):
    """Batch mode (engine/run/batchdesk.py): the answer to call ``key`` from a provider's batch
    (a providers.batchapi.LineResult), or BatchPending raised while it waits in one."""

    async def answer(
        self, *, step_id: str, provider: Any, api: Any, key: str, endpoint: str, body: Any
    ) -> Any: ...

    def holds(self, key: str) -> bool:
        """Whether call ``key`` waits in a batch not yet collected (or its answer does)."""
        ...


class ProviderAccess(Protocol):
    """How a step reaches model providers without knowing configuration files."""

    def get(self, name: str | None) -> Any: ...

    def default_name(self) -> str: ...


@dataclass
class StepEnv:
    """What every execution of one pipeline shares: where things are and the handles to use."""

    root: Path  # the pipeline's root; pipeline paths resolve inside it
    state_dir: Path
    objects: ObjectStore
    providers: ProviderAccess | None = None
    pipeline_file: Path | None = None
    # The user accepts paying twice: calls whose reply was lost are sent again (--retry-uncertain).
    retry_uncertain: bool = False
    batches: BatchAccess | None = None  # the run's batches (None: no batch mode, e.g. plan)

    @cached_property
    def secret_names(self) -> frozenset[str]:
        """The variables runner.toml's providers read secrets from (api_key_env, ...), withheld
        from commands: read once per run, as the run's providers are (not once per command)."""
        from ..source.secretnames import provider_env_names

        return provider_env_names(self.root)


@dataclass
class StepContext:
    """One attempt of one execution (a step, or one for_each element of it)."""

    env: StepEnv
    run_id: str
    step_id: str
    element: int | None = None
    attempt: int = 1
    # Why the previous attempt failed its checks: only a failed check is feedback. A transient
    # failure (a 5xx, a timeout) is retried with the very same request, never described to it.
    feedback: list[str] = field(default_factory=list)
    check_round: int = 0  # how many check failures the feedback has followed (0: none yet)
    review: list[str] = field(default_factory=list)  # a reviewer's `revise` words, as given
    ledger: Ledger | None = None
    log: Callable[[str], None] = lambda _line: None
    # Where a call waits in its provider's queue ("queued, 1 ahead on HOST"): said on the
    # console, the live display and the page while it waits.
    waiting: Callable[[str], None] = lambda _where: None
    # A step not safe to repeat: where its body marks that it began (engine/run/once.py)
    once: str | None = None
    # Its commands run confined to what it declares (`sandbox: false` says no), without the
    # network unless it says `network: true` (runner/expr/confined.py).
    sandbox: bool = True
    network: bool = False

    @property
    def root(self) -> Path:
        return self.env.root

    @property
    def objects(self) -> ObjectStore:
        return self.env.objects

    @property
    def log_dir(self) -> Path:
        return self.env.state_dir / "logs" / "runs" / self.run_id


class ResultStatus(enum.Enum):
    OK = "ok"
    PARTIAL = "partial"  # produced output, but a contract no longer holds (e.g. card drift)


@dataclass
class StepResult:
    """What a step returns: its JSON output and the objects that output refers to.

    ``files`` maps workspace paths (relative to the root) to object digests: the engine restores
    them from the store when they are deleted, without running the step.

    ``reads``: the files the body read (relative to the root) with the sha256 of the bytes it
    read, as a type with ``records_reads`` recorded them: the key names them (recorded reads,
    not predicted ones; engine/run/recorded.py).
    """

    output: dict[str, Any]
    artifacts: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    status: ResultStatus = ResultStatus.OK
    report: dict[str, Any] | None = None
    usage: dict[str, int] = field(default_factory=dict)
    reads: dict[str, str] = field(default_factory=dict)


class StepType:
    """Base class for step types. Subclasses set the class attributes and implement ``run``.

    Class attributes:
      name: the ``uses:`` name.  version: part of every key of this type.
      schema: JSON Schema of ``with:``, checked at compile time.
      output_doc: each field of the output (``steps.ID.output.FIELD``) and what it holds, shown
        by ``runner steps NAME`` beside the schema (a for_each step's output is the list of its
        elements' outputs).
      requires_check: a step of this type without ``check:`` is a compile error.
      produces_prompt: ``runner render`` shows this step's output ``text``.
      predictable: ``run`` only reads its key's inputs and returns its output (no objects, no
        files, no provider, no awaiting): ``runner plan`` may compute it to see past it.
      runs_anywhere: the body needs only its arguments, the root, the object store, its log
        and feedback (no provider, journal or gate), so `--executor dask` may run it on a worker.
      shareable: a result may be shared through a remote cache (false for steps whose effect
        is a human decision or state outside the object store).
      key_neutral: arguments that decide how the step runs, never what it gives (a
        concurrency cap), each with why: kept out of the step's key and its calls' keys. Every
        other argument is a key part; tests/engine/test_key_completeness.py holds every registered
        type to that.
      records_reads: the body returns in ``StepResult.reads`` what it read beyond ``reads()``
        (a template's computed include): the key names those files, as the last execution with
        the same other parts recorded them (engine/run/recorded.py).
    """

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    description: ClassVar[str] = ""
    schema: ClassVar[dict[str, Any]] = {"type": "object"}
    output_doc: ClassVar[dict[str, str]] = {}
    requires_check: ClassVar[bool] = False
    produces_prompt: ClassVar[bool] = False
    predictable: ClassVar[bool] = False
    shareable: ClassVar[bool] = True
    runs_anywhere: ClassVar[bool] = False
    key_neutral: ClassVar[Mapping[str, str]] = {}
    records_reads: ClassVar[bool] = False

    def validate(self, args: Mapping[str, Any], *, root: Path, where: Location | None) -> None:
        """Extra compile-time checks beyond the schema (e.g. a template file exists).

        ``args`` may still hold unevaluated ``${{ }}`` strings. Raise InvalidPipeline.
        """

    def output_shape(self, args: Mapping[str, Any]) -> Shape:
        """What ``run`` returns (steps/outputshape.py), for ``args`` as written (``${{ }}``
        strings unevaluated). Default: the fields ``output_doc`` names, of the kinds its words
        say; a type whose output depends on its arguments says so here."""
        return from_doc(self.output_doc)

    def reads(self, args: Mapping[str, Any], *, root: Path) -> list[str]:
        """Files (relative to root) whose content is part of this step's key; watched by watch.

        Called with resolved arguments before the key is computed.
        """
        return []

    def produces(self, args: Mapping[str, Any]) -> list[str]:
        """Workspace files (relative to root) this step writes; a step that reads one of them
        runs after it even without `needs`."""
        return []

    def key_extra(self, args: Mapping[str, Any], env: StepEnv) -> dict[str, Any]:
        """Anything else that can change the output (e.g. a provider profile)."""
        return {}

    def settle_run(
        self,
        *,
        journal: Any,
        run_id: str,
        plan: Any,
        outputs: dict[str, Any],
        status: str,
        exit_code: int,
    ) -> tuple[str, int] | None:
        """A run with a step of this type may end otherwise than its steps' statuses say (an
        image run ends by its iterations): (status, exit code), decided once before the run's
        end is journaled and reported; None leaves it as it is."""
        return None

    def evaluate(self, compiled: Any, context: Mapping[str, Any]) -> Any:
        """``with:`` with its ``${{ }}`` evaluated; a type whose arguments are code (the shell
        step's ``run``) quotes the values it pastes into them here."""
        from ..expr import evaluate_value

        return evaluate_value(compiled, context)

    async def run(self, ctx: StepContext, args: dict[str, Any]) -> StepResult:
        raise NotImplementedError


_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def reference_files(refs: Any, root: Path, *, existing: bool = False) -> list[str]:
    """The workspace paths among ``refs`` (object digests are content already), for a step's
    ``reads``: their content is part of its key, so an image swapped under the same name is
    seen. ``existing``: only files there now (one that appears later then changes the key).
    Raises InvalidPipeline for a path outside the root."""
    from ..source.paths import inside

    out: list[str] = []
    for ref in [refs] if isinstance(refs, str) else refs or []:
        if isinstance(ref, str) and not _DIGEST.match(ref):
            path = inside(root, ref, where=Location(ref))
            if not existing or path.is_file():
                out.append(ref)
    return out


def invalid(message: str, where: Location | None, hint: str | None = None) -> InvalidPipeline:
    return InvalidPipeline(message, where=where, hint=hint)
