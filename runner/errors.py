"""The error families of runner, each with its CLI exit code and where it happened.

Setup mistakes (a bad pipeline, an unknown id) are raised as these. Step failures are not: they are
recorded values in the journal (see ``runner.engine``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING


class Location:
    """A place in a source file: 1-based line and column, as editors show them. Frozen, with a
    dataclass's equality and repr (written out: every command imports this module, and
    dataclasses would cost a no-op ~6 ms of imports)."""

    __match_args__ = ("file", "line", "column")
    if TYPE_CHECKING:  # read-only to the type checker, as a frozen dataclass's fields are

        @property
        def file(self) -> str: ...
        @property
        def line(self) -> int: ...
        @property
        def column(self) -> int: ...

    def __init__(self, file: str, line: int = 0, column: int = 0) -> None:
        fields = self.__dict__
        fields["file"] = file
        fields["line"] = line
        fields["column"] = column

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Location)
        return (self.file, self.line, self.column) == (other.file, other.line, other.column)

    def __hash__(self) -> int:
        return hash((self.file, self.line, self.column))

    def __repr__(self) -> str:
        return f"Location(file={self.file!r}, line={self.line!r}, column={self.column!r})"

    def __str__(self) -> str:
        if self.line <= 0:
            return self.file
        return f"{self.file}:{self.line}:{self.column}"


class RunnerError(Exception):
    """Base of every error runner raises on purpose; carries an exit code and a location."""

    exit_code = 1

    def __init__(
        self,
        message: str,
        *,
        where: Location | None = None,
        step: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.where = where
        self.step = step
        self.hint = hint

    def __str__(self) -> str:
        parts = []
        if self.where is not None:
            parts.append(f"{self.where}: ")
        if self.step is not None:
            parts.append(f"step '{self.step}': ")
        parts.append(self.message)
        text = "".join(parts)
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def to_json(self) -> dict[str, object]:
        return {
            "type": type(self).__name__,
            "message": self.message,
            "where": str(self.where) if self.where else None,
            "step": self.step,
            "hint": self.hint,
        }


class UsageError(RunnerError):
    """The command line asked for something that cannot be done as asked."""

    exit_code = 2


class InvalidPipeline(RunnerError):
    """The pipeline file (or a file it names) is not a valid pipeline."""

    exit_code = 2


class ExpressionError(InvalidPipeline):
    """An expression that does not parse, names something unknown, or was refused by the sandbox."""


class TemplateError(InvalidPipeline):
    """A template that does not parse or needs a variable it was not given."""


class RuleError(InvalidPipeline):
    """A rule that is malformed or cannot be evaluated."""


class NotFound(RunnerError):
    """An unknown run, step, iteration or item id."""

    exit_code = 3


class StoreError(RunnerError):
    """The journal or the object store cannot do what was asked (I/O, corruption, a lock)."""

    exit_code = 1


class DiskFull(StoreError):
    """The disk holding the state directory is full: the run stops, what finished is kept."""


class Busy(RunnerError):
    """Another apply holds what this one needs (the same item, the same state directory)."""

    exit_code = 2


class Failure(StrEnum):
    """What a failed provider call may have done at the backend; it decides what happens next.

    TRANSIENT: refused before any work (connect error, 429, 503, 408, a request whose body never
    went out): safe to send again, after a backoff. PERMANENT: the request or the account needs
    the user (400, 401, 403, 404, 422, quota used up, a reply we cannot use): never sent again as
    it is. MAYBE_EXECUTED: the request went out and the reply was lost (read timeout, connection
    reset after the body was sent, 502/504 from a proxy): the backend may have done, and billed,
    the work; a synchronous call is not sent again unless the user says so (``retry_uncertain``),
    a job-queue backend is asked about its job instead.
    """

    TRANSIENT = "transient"
    PERMANENT = "permanent"
    MAYBE_EXECUTED = "maybe_executed"


class CallStatus(StrEnum):
    """The journaled state of one keyed provider call (the ``calls`` table's ``status``)."""

    IN_FLIGHT = "in_flight"
    COMPLETED = "completed"
    FAILED = "failed"
    MAYBE_EXECUTED = "maybe_executed"


class ProviderError(RunnerError):
    """A model provider call failed; ``failure`` says what the backend may have done.

    ``transient`` (kept for callers that only ask "may a retry help?") is true only for
    Failure.TRANSIENT. ``remote_id`` is the backend's id of the job or request when it gave one.
    """

    exit_code = 1

    def __init__(
        self,
        message: str,
        *,
        transient: bool = False,
        maybe_executed: bool = False,
        status: int | None = None,
        retry_after: float | None = None,
        provider: str | None = None,
        remote_id: str | None = None,
    ) -> None:
        super().__init__(message)
        if transient and maybe_executed:
            raise ValueError("a provider error is transient or maybe-executed, not both")
        self.failure = (
            Failure.MAYBE_EXECUTED
            if maybe_executed
            else Failure.TRANSIENT
            if transient
            else Failure.PERMANENT
        )
        self.status = status
        self.retry_after = retry_after
        self.provider = provider
        self.remote_id = remote_id

    @property
    def transient(self) -> bool:
        return self.failure is Failure.TRANSIENT

    @property
    def maybe_executed(self) -> bool:
        return self.failure is Failure.MAYBE_EXECUTED

    @property
    def kind(self) -> str:
        return self.failure.value


class StepFailure(Exception):
    """Raised inside a step body to fail the attempt with a clear reason (no traceback shown).

    ``retryable`` marks transient trouble (the engine retries it when the step has ``retries``).
    """

    def __init__(
        self,
        reason: str,
        *,
        retryable: bool = False,
        check: bool = False,
        output: dict[str, object] | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.check = check
        # What the step did produce before failing (e.g. every failed iteration): journaled.
        self.output = output
