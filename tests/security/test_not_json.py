"""Values JSON cannot carry never reach the journal, events or --json: a provider reply with
NaN/Infinity (read strictly: the element fails, permanently, saying why), a lone surrogate (a
``\\ud800`` escape in a reply, a file name that is not UTF-8 found by a glob), and the journal's
own encoder refuses NaN as the last guard.

The class and its corpus: tests/providers/faults.py (``not-json-*``: NaN, Infinity, -Infinity,
1e400, 100k-deep nesting, a lone surrogate) runs against each provider's loopback server
(OpenAI, Ollama, ComfyUI, A1111); here the same reply goes through a real `runner apply`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runner.state.canonical import CanonicalError, loads_strict
from runner.state.records import dumps

from ..providers.openai_server import OpenAIServer
from ..providers.servers import Reply

LLM = """\
runner: 1
name: ask
steps:
  ask:
    uses: llm
    retries: 3
    with: {prompt: "say hi"}
    check: ["${{ steps.ask.output.text | length > 0 }}"]
"""


def _runner(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    env.update(NO_COLOR="1", LLM_CRED_VAR="sk-test")
    return subprocess.run(
        [sys.executable, "-m", "runner", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _strict_documents(root: Path, run_id: str) -> None:
    """`runs show --json` and `runs events` are strict JSON (a NaN would not parse)."""
    shown = _runner(root, "runs", "show", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    loads_strict(shown.stdout)
    events = _runner(root, "runs", "events", run_id)
    for line in events.stdout.splitlines():
        loads_strict(line)


def _chat_reply(extra: str) -> bytes:
    return (
        '{"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "test-chat",'
        ' "choices": [{"index": 0, "finish_reason": "stop",'
        ' "message": {"role": "assistant", "content": "hi"}, ' + extra + "}],"
        ' "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}'
    ).encode()


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ('"logprobs": {"content": [{"token": "hi", "logprob": NaN}]}', "NaN is not a JSON"),
        ('"logprobs": {"content": [{"token": "hi", "logprob": -Infinity}]}', "-Infinity is not"),
        ('"logprobs": {"content": [{"token": "hi", "logprob": -1e999}]}', "out of range"),
        ('"logprobs": {"content": [{"token": "\\udc80", "logprob": -1}]}', "lone UTF-16"),
    ],
)
def test_a_reply_json_cannot_carry_fails_its_element_once_and_clearly(
    tmp_path: Path, extra: str, says: str
) -> None:
    (tmp_path / "pipeline.yaml").write_text(LLM)
    with OpenAIServer() as server:
        (tmp_path / "runner.toml").write_text(
            textwrap.dedent(f"""\
            [general]
            default_provider = "openai"
            [providers.openai]
            base_url = "{server.url}/v1"
            model = "test-chat"
            api_key_env = "LLM_CRED_VAR"
            retry_base_delay = 0.01
            retry_max_delay = 0.02
            """)
        )
        server.queue("POST", "/v1/chat/completions", Reply(200, _chat_reply(extra)))
        done = _runner(tmp_path, "apply", "pipeline.yaml", "--json")
        sent = server.count("POST", "/v1/chat/completions")
    assert done.returncode == 4, done.stderr  # the step failed; not a crash
    assert says in done.stderr and "bug" not in done.stderr
    assert sent == 1  # permanent: the same reply would come back, never paid for again
    doc = loads_strict(done.stdout)
    assert doc["run"]["status"] == "failed"
    _strict_documents(tmp_path, doc["run"]["id"])


def test_a_file_name_that_is_not_utf8_fails_its_element_not_the_run(tmp_path: Path) -> None:
    (tmp_path / "runner.toml").write_text("")
    (tmp_path / "data").mkdir()
    (tmp_path / os.fsdecode(b"data/ok\xff.txt")).write_text("hi")
    (tmp_path / "data" / "fine.txt").write_text("fine")
    (tmp_path / "p.yaml").write_text(
        "runner: 1\nname: g\nsteps:\n"
        "  r: {uses: read, with: {path: 'data/*'}}\n"
        "  s: {uses: shell, with: {run: 'printf x'}}\n"
    )
    done = _runner(tmp_path, "apply", "p.yaml", "--json")
    assert done.returncode == 6 and "bug" not in done.stderr  # partial; crashed in keys before
    assert "path 'data/ok\\xff.txt' is not UTF-8 (byte 0xff)" in done.stderr
    doc = loads_strict(done.stdout)
    assert doc["run"]["status"] == "partial"  # the other step ran; nothing left `running`
    _strict_documents(tmp_path, doc["run"]["id"])


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_the_journal_encoder_refuses_numbers_json_has_not(value: float) -> None:
    with pytest.raises(CanonicalError, match="cannot be recorded as JSON"):
        dumps({"output": {"score": value}})
    assert json.loads(dumps({"score": 0.5})) == {"score": 0.5}


GATE = """\
runner: 1
name: gated
steps:
  draft: {uses: shell, with: {run: "printf draft"}}
  review:
    uses: human_gate
    needs: [draft]
    with: {summary: "ok?", revise: draft}
"""


@pytest.mark.parametrize("body", ['{"x": NaN}', '{"x": [1, -Infinity]}', '{"x": 1e400}'])
def test_a_reviewer_input_file_json_cannot_carry_is_a_usage_error(
    tmp_path: Path, body: str
) -> None:
    (tmp_path / "runner.toml").write_text("")
    (tmp_path / "p.yaml").write_text(GATE)
    first = _runner(tmp_path, "apply", "p.yaml", "--json")
    assert first.returncode == 7, first.stderr
    run_id = json.loads(first.stdout)["run"]["id"]
    (tmp_path / "input.json").write_text(body)
    done = _runner(tmp_path, "decide", run_id, "review", "revise", "--input-file", "input.json")
    assert done.returncode == 2 and "bug" not in done.stderr, done.stderr  # was a traceback
    assert "--input-file input.json:" in done.stderr
    _strict_documents(tmp_path, run_id)
    shown = json.loads(_runner(tmp_path, "runs", "decisions", run_id, "--json").stdout)
    assert [d["status"] for d in shown["decisions"]] == ["pending"]  # nothing was recorded
