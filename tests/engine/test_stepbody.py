"""One attempt of a step body from plain data (engine/run/stepbody.py): what it returns or raises
comes back as plain data, the objects it made are in the store, and nothing reaches a journal."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from runner.engine.run.executors import LocalExecutor
from runner.engine.run.stepbody import BodyRun, run_body
from runner.errors import DiskFull, ProviderError, StepFailure
from runner.state.objects import ObjectStore
from runner.steps.base import StepContext, StepEnv, StepResult, StepType
from runner.steps.registry import default_registry


def _ctx(root: Path, log: list[str] | None = None) -> StepContext:
    state = root / ".runner"
    env = StepEnv(root=root, state_dir=state, objects=ObjectStore(state / "objects"))
    return StepContext(env=env, run_id="r1", step_id="s", log=(log or []).append)


class Raising(StepType):
    """A body that raises what it is given: the failure modes a real body can have."""

    name = "raising"

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def run(self, ctx: StepContext, args: dict[str, Any]) -> StepResult:
        raise self.exc


class Slow(StepType):
    name = "slow"

    async def run(self, ctx: StepContext, args: dict[str, Any]) -> StepResult:
        await asyncio.sleep(30)
        return StepResult(output={})


def _run(step_type: StepType, root: Path, args: dict[str, Any], **kw: Any) -> BodyRun:
    options: dict[str, Any] = {"timeout": None, "resources": None, **kw}
    return asyncio.run(
        run_body(LocalExecutor(), step_type, _ctx(root), args, uses=step_type.name, **options)
    )


def test_a_body_returns_plain_data_and_its_new_objects_are_in_the_store(tmp_path: Path) -> None:
    if shutil.which("sh") is None:
        pytest.skip("no sh")
    shell = default_registry().get("shell")
    assert shell is not None
    args = {"run": "echo hello > out.txt", "outputs": ["out.txt"]}
    body = _run(shell, tmp_path, args)
    assert body.reason == "" and body.failure is None and body.traceback is None
    assert body.result is not None
    digest = body.result.files["out.txt"]
    store = ObjectStore(tmp_path / ".runner" / "objects")
    assert store.has(digest)
    assert store.path(digest).read_bytes() == b"hello\n"
    # The body wrote no journal: the state directory holds objects only.
    assert not (tmp_path / ".runner" / "journal.db").exists()


def test_the_same_arguments_give_the_same_output(tmp_path: Path) -> None:
    hash_type = default_registry().get("hash")
    assert hash_type is not None
    a = _run(hash_type, tmp_path, {"value": {"b": 1, "a": [2, 3]}})
    b = _run(hash_type, tmp_path, {"value": {"a": [2, 3], "b": 1}})
    assert a.result is not None and b.result is not None
    assert a.result.output == b.result.output


@pytest.mark.parametrize(
    ("exc", "reason", "retryable", "check"),
    [
        (StepFailure("no face found", check=True), "no face found", False, True),
        (StepFailure("busy", retryable=True), "busy", True, False),
        (
            ProviderError("503 from the backend", transient=True),
            "transient provider error: 503 from the backend",
            True,
            False,
        ),
        (
            ProviderError("400 bad prompt"),
            "permanent provider error: 400 bad prompt",
            False,
            False,
        ),
    ],
)
def test_a_failure_comes_back_as_its_reason_and_whether_a_retry_may_help(
    tmp_path: Path, exc: Exception, reason: str, retryable: bool, check: bool
) -> None:
    body = _run(Raising(exc), tmp_path, {})
    assert body.result is None
    assert (body.reason, body.retryable, body.check) == (reason, retryable, check)


def test_a_failing_body_hands_back_what_it_produced(tmp_path: Path) -> None:
    body = _run(Raising(StepFailure("2 of 3 failed", output={"done": [1]})), tmp_path, {})
    assert body.failure is not None and body.failure.output == {"done": [1]}


def test_a_bug_in_a_step_type_is_a_failure_with_its_traceback(tmp_path: Path) -> None:
    body = _run(Raising(ZeroDivisionError("division by zero")), tmp_path, {})
    assert (
        body.reason == "internal error in step type 'raising': ZeroDivisionError: division by zero"
    )
    assert body.traceback is not None and "ZeroDivisionError" in body.traceback
    assert body.check is None  # says nothing about checks
    assert not body.retryable


def test_a_body_past_its_timeout_is_a_retryable_failure(tmp_path: Path) -> None:
    body = _run(Slow(), tmp_path, {}, timeout=0.05)
    assert (body.reason, body.retryable, body.check) == ("the step's timeout fired after 0.05s", True, False)


def test_a_full_disk_is_not_the_steps_failure_it_stops_the_run(tmp_path: Path) -> None:
    with pytest.raises(DiskFull):
        _run(Raising(DiskFull("no space left on device")), tmp_path, {})
