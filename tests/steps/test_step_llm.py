"""The llm step: messages, feedback on retries, JSON + schema checks, ledger reuse, usage."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from runner.errors import InvalidPipeline, StepFailure
from runner.providers.fake import FakeProvider
from runner.steps.base import StepEnv, StepResult
from runner.steps.llm import FEEDBACK_HEADING, LlmStep, with_feedback
from tests.conftest import Project, ran
from tests.providers.ollama_server import OllamaServer
from tests.providers.servers import png
from tests.providers.stepkit import MemoryLedger, make_ctx, make_env

SCRIPT = """
[providers.fake]
script = [
  {match = "Previous attempt failed because:\\n- needs a title", reply = "# Title\\nBody"},
  {match = "(?s)^terse.*write the report", reply = "Body without a title"},
  {match = "classify", reply = "```json\\n{\\"label\\": \\"invoice\\"}\\n```"},
  {match = "bad json", reply = "{not json"},
  {match = "nan json", reply = '{"score": NaN}'},
  {match = "huge json", reply = '{"score": 1e400}'},
]
"""


def run(
    env: StepEnv,
    args: dict[str, Any],
    ledger: MemoryLedger | None = None,
    feedback: list[str] | None = None,
    attempt: int = 1,
) -> StepResult:
    ctx = make_ctx(env, ledger, feedback=feedback, attempt=attempt)
    return asyncio.run(LlmStep().run(ctx, dict(args)))


def fake_of(env: StepEnv) -> FakeProvider:
    assert env.providers is not None
    provider = env.providers.get(None)
    assert isinstance(provider, FakeProvider)
    return provider


def test_text_reply_output_usage_and_stored_text(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    result = run(env, {"system": "be kind", "prompt": "describe the harbour"})
    out = result.output
    assert "describe the harbour" in out["text"] and out["json"] is None
    assert out["provider"] == "fake" and out["provider_profile"].startswith("fake@1:")
    assert out["model"] == "fake-1"
    assert result.usage == out["usage"] and result.usage["prompt_tokens"] == 5
    assert env.objects.read_bytes(out["sha256"]).decode() == out["text"]
    assert result.artifacts == [out["sha256"]]


def test_feedback_is_appended_and_changes_the_key(tmp_path: Path) -> None:
    env = make_env(tmp_path, SCRIPT)
    args = {"system": "terse", "prompt": "write the report"}
    first = run(env, args)
    assert first.output["text"] == "Body without a title"
    retry = run(env, args, feedback=["needs a title"], attempt=2)
    assert retry.output["text"] == "# Title\nBody"
    assert retry.output["idempotency_key"] != first.output["idempotency_key"]


def test_with_feedback_targets_the_last_user_message() -> None:
    msgs = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c"},
    ]
    out = with_feedback(msgs, ["r1", "r2"])
    assert out[2]["content"] == f"c\n\n{FEEDBACK_HEADING}\n- r1\n- r2"
    assert msgs[2]["content"] == "c" and out[0] == msgs[0]
    assert with_feedback(msgs, []) is msgs


def test_json_reply_in_a_code_fence_is_parsed_and_checked(tmp_path: Path) -> None:
    env = make_env(tmp_path, SCRIPT)
    schema = {
        "type": "object",
        "required": ["label"],
        "properties": {"label": {"enum": ["invoice", "letter"]}},
    }
    result = run(env, {"prompt": "classify this", "format": "json", "schema": schema})
    assert result.output["json"] == {"label": "invoice"}
    with pytest.raises(StepFailure) as info:
        run(
            env,
            {
                "prompt": "classify this",
                "schema": {**schema, "properties": {"label": {"enum": ["letter"]}}},
            },
        )
    assert info.value.check and "does not match the schema at label" in info.value.reason


def test_reply_that_is_not_json_fails_the_check(tmp_path: Path) -> None:
    env = make_env(tmp_path, SCRIPT)
    with pytest.raises(StepFailure, match="not valid JSON") as info:
        run(env, {"prompt": "bad json please", "format": "json"})
    assert info.value.check


@pytest.mark.parametrize(
    ("prompt", "problem"),
    [("nan json please", "'NaN' is not JSON"), ("huge json please", "1e400 is out of range")],
)
def test_a_reply_json_cannot_carry_fails_the_check(
    tmp_path: Path, prompt: str, problem: str
) -> None:
    """Python's json reads NaN and 1e400 (inf): such a reply would reach the journal, and
    `runs show --json`, as NaN. It fails the check instead (and is retried with feedback)."""
    env = make_env(tmp_path, SCRIPT)
    with pytest.raises(StepFailure, match="not valid JSON") as info:
        run(env, {"prompt": prompt, "format": "json"})
    assert info.value.check and problem in info.value.reason


def test_unscripted_schema_replies_satisfy_the_schema(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    schema = {
        "type": "object",
        "required": ["label", "confidence"],
        "properties": {"label": {"enum": ["a", "b"]}, "confidence": {"type": "number"}},
    }
    result = run(env, {"prompt": "anything", "schema": schema})
    assert result.output["json"]["label"] in ("a", "b")


def test_ledger_reuse_never_calls_again(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    ledger = MemoryLedger()
    first = run(env, {"prompt": "hello"}, ledger)
    second = run(env, {"prompt": "hello"}, ledger)
    assert fake_of(env).calls == 1
    assert second.output == first.output  # the ledger's answer is the fresh value
    assert second.report == {"reused_calls": [first.output["idempotency_key"]]}
    assert [op for op, _ in ledger.ops] == ["begin", "complete"]


def test_provider_failures_become_step_failures(tmp_path: Path) -> None:
    env = make_env(tmp_path, "[providers.fake]\nmax_retries = 1\n")
    ledger = MemoryLedger()
    with pytest.raises(StepFailure) as info:
        run(env, {"prompt": "[[FAIL_PERMANENT]]"}, ledger)
    assert not info.value.retryable and not info.value.check
    with pytest.raises(StepFailure) as info:
        run(env, {"prompt": "[[FAIL_TRANSIENT:3]]"}, ledger)
    assert info.value.retryable
    assert [op for op, _ in ledger.ops] == ["begin", "fail", "begin", "fail"]
    # a failed key is not "completed": the next attempt calls again and, here, succeeds
    assert run(env, {"prompt": "[[FAIL_TRANSIENT:3]]"}, ledger).output["text"]


def test_over_a_real_socket_with_ollama(tmp_path: Path) -> None:
    with OllamaServer() as server:
        env = make_env(
            tmp_path,
            f'[general]\ndefault_provider = "ollama"\n'
            f'[providers.ollama]\nbase_url = "{server.url}"\n'
            f'model = "llama-test"\n',
        )
        ledger = MemoryLedger()
        args = {"prompt": "hi", "temperature": 0, "seed": 3, "max_tokens": 20}
        result = run(env, args, ledger)
        run(env, args, ledger)
        assert server.count("POST", "/api/chat") == 1
        body = server.requests[0].json()
    assert body["options"] == {"temperature": 0, "seed": 3, "num_predict": 20}
    assert result.output["text"] == "ollama says: hi" and result.output["model"] == "llama-test"
    assert result.usage == {"prompt_tokens": 21, "completion_tokens": 5}


def test_image_inputs_are_loaded_from_the_store(tmp_path: Path) -> None:
    with OllamaServer() as server:
        env = make_env(tmp_path, f'[providers.ollama]\nbase_url = "{server.url}"\n')
        picture = png((10, 20, 30), (4, 4))  # a whole image: a reference is checked to be one
        digest = env.objects.put_bytes(picture)
        run(
            env,
            {
                "provider": "ollama",
                "messages": [{"role": "user", "content": "what is this?", "images": [digest]}],
            },
        )
        body = server.requests[0].json()
    assert body["messages"][0]["images"] == [base64.b64encode(picture).decode("ascii")]


def test_compile_time_validation(tmp_path: Path) -> None:
    step = LlmStep()
    assert step.requires_check and step.produces_prompt
    with pytest.raises(InvalidPipeline, match="needs `prompt` or `messages`"):
        step.validate({"system": "x"}, root=tmp_path, where=None)
    with pytest.raises(InvalidPipeline, match="not a valid JSON Schema"):
        step.validate({"prompt": "x", "schema": {"type": 5}}, root=tmp_path, where=None)
    step.validate({"prompt": "${{ steps.a.output.text }}"}, root=tmp_path, where=None)


def test_a_lost_reply_object_is_made_again_from_the_ledger_never_paid_again(
    project: Project,
) -> None:
    """An llm reply's object is not fsynced (the ledger holds the text): one a power loss
    damages or loses is found by the next apply, which runs the step again, answered by the
    ledger (no second provider call), and the object is whole again."""
    import os
    import sqlite3

    project.write(
        "pipeline.yaml",
        """\
        runner: 1
        name: p
        steps:
          ask:
            uses: llm
            with: {prompt: "say hello"}
            check: ["${{ output.text | length > 0 }}"]
    """,
    )
    first = project.apply()
    assert ran(first) == {"ask"}
    db = project.root / ".runner/journal.db"
    with sqlite3.connect(db) as conn:
        (artifacts,) = conn.execute(
            "SELECT artifacts FROM executions WHERE step_id='ask' AND status='completed'"
        ).fetchone()
    digest = json.loads(artifacts)[0]
    obj = project.root / ".runner/objects" / digest[:2] / digest[2:]
    os.chmod(obj, 0o644)
    obj.write_bytes(b"torn")  # what a power loss can leave of a file never fsynced
    second = project.apply()
    assert ran(second) == {"ask"}
    with sqlite3.connect(db) as conn:
        calls = conn.execute("SELECT status FROM calls").fetchall()
    assert calls == [("completed",)]  # one call in all: the second apply used the ledger
    assert hashlib.sha256(obj.read_bytes()).hexdigest() == digest
    assert ran(project.apply()) == set()
