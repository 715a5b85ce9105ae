"""Only a failed check is feedback: a transient failure or the step's timeout is retried with the
very request the user's pipeline makes, and a call in flight when the step's timeout fires is
maybe-executed (never sent again without --retry-uncertain).

Each test runs `runner apply` in a subprocess against the OpenAI loopback double on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import textwrap
from pathlib import Path
from typing import Any

from tests.conftest import runner_bin
from tests.providers.openai_server import OpenAIServer
from tests.providers.servers import Reply

FAILED_BECAUSE = "Previous attempt failed because"


def _project(root: Path, url: str, pipeline: str, *, timeout: float = 10, retries: int = 0) -> None:
    (root / "runner.toml").write_text(
        textwrap.dedent(
            f"""\
            [general]
            default_provider = "gw"

            [providers.gw]
            type = "openai"
            base_url = "{url}/v1"
            model = "test-chat"
            timeout = {timeout}
            max_retries = {retries}
            retry_base_delay = 0.01
            retry_max_delay = 0.02
            """
        ),
        encoding="utf-8",
    )
    (root / "pipeline.yaml").write_text(textwrap.dedent(pipeline), encoding="utf-8")


def _apply(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    env["NO_COLOR"] = "1"
    return subprocess.run(
        [*runner_bin(), "apply", "pipeline.yaml", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _chats(server: OpenAIServer) -> list[dict[str, Any]]:
    return [r.json() for r in server.requests if r.path.endswith("/chat/completions")]


def _kept_replies(root: Path) -> list[str]:
    """The replies the journal's ledger holds as completed calls."""
    with sqlite3.connect(root / ".runner" / "journal.db") as db:
        rows = db.execute("SELECT result FROM calls WHERE status='completed'").fetchall()
    return [json.loads(r[0])["text"] for r in rows]


def _user_text(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


ASK = """\
runner: 1
name: ask
steps:
  answer:
    uses: llm
    retries: 2
    with:
      prompt: "Name one colour."
    check:
      - "${{ output.text | length > 0 }}"
"""


def test_a_gateway_5xx_is_retried_with_the_users_own_prompt_and_its_answer_kept(
    tmp_path: Path,
) -> None:
    """The gateway's model is briefly down (HTTP 500 twice, past the provider's own retries):
    the step's retries send the user's prompt unchanged, and the answer kept is the answer to
    it, under the call key a fresh apply would use."""
    with OpenAIServer() as server:
        _project(tmp_path, server.url, ASK)
        down = Reply(500, {"error": {"message": "model test-chat is loading"}})
        server.queue("POST", "/v1/chat/completions", down, down)
        done = _apply(tmp_path, "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        bodies = _chats(server)
        assert len(bodies) == 3
        assert {_user_text(b) for b in bodies} == {"Name one colour."}, bodies
        assert all(FAILED_BECAUSE not in json.dumps(b) for b in bodies)
        assert _kept_replies(tmp_path) == ["echo: Name one colour."]

        # A fresh apply elsewhere with a healthy gateway asks the same request once.
        fresh = tmp_path / "fresh"
        fresh.mkdir()
        _project(fresh, server.url, ASK)
        again = _apply(fresh, "--json")
        assert again.returncode == 0, again.stdout + again.stderr
        assert _chats(server)[-1] == bodies[-1]


CHECKED = """\
runner: 1
name: checked
steps:
  answer:
    uses: llm
    retries: 3
    with:
      prompt: "Say DONE."
    check:
      - {expr: "${{ 'FIXED' in output.text }}", message: "the reply must say FIXED"}
"""


def test_a_transient_failure_after_a_check_failure_resends_the_same_check_feedback(
    tmp_path: Path,
) -> None:
    """attempt 1 fails its check, attempt 2 meets a 500, attempt 3 is attempt 2's request
    again: the check's reason is the only feedback, and the 500 never reaches the prompt."""
    with OpenAIServer() as server:
        _project(tmp_path, server.url, CHECKED)
        server.queue(
            "POST",
            "/v1/chat/completions",
            Reply(
                body={
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "created": 1,
                    "model": "test-chat",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "no"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
                }
            ),
            Reply(500, {"error": {"message": "upstream connect error"}}),
        )
        done = _apply(tmp_path)
        bodies = _chats(server)
        assert len(bodies) >= 3, done.stdout + done.stderr
        first, second, third = (_user_text(b) for b in bodies[:3])
        assert first == "Say DONE."
        assert second == third, (second, third)
        assert "the reply must say FIXED" in second
        assert "500" not in second and "upstream" not in second


SLOW = """\
runner: 1
name: slow
steps:
  answer:
    uses: llm
    retries: 2
    timeout: 0.5
    with:
      prompt: "Write a long story."
    check:
      - "${{ output.text | length > 0 }}"
"""


def test_a_step_timeout_during_a_paid_call_makes_it_maybe_executed_and_never_repays(
    tmp_path: Path,
) -> None:
    """timeout 0.5 s, retries 2, a 2 s generation: one request is sent, the step fails saying
    the step's timeout fired and how to send it again; a later apply sends nothing; only
    --retry-uncertain sends it again."""
    with OpenAIServer(work_s=2.0) as server:
        _project(tmp_path, server.url, SLOW)
        done = _apply(tmp_path)
        assert done.returncode != 0, done.stdout + done.stderr
        assert len(_chats(server)) == 1
        said = done.stdout + done.stderr
        assert "step's timeout" in said, said
        assert "--retry-uncertain" in said, said
        assert "timed out after" not in json.dumps([_user_text(b) for b in _chats(server)])

        again = _apply(tmp_path)
        assert again.returncode != 0
        assert len(_chats(server)) == 1, again.stdout + again.stderr
        server.settled()

        # The user accepts paying again, with a timeout the generation fits in.
        (tmp_path / "pipeline.yaml").write_text(SLOW.replace("0.5", "10"), encoding="utf-8")
        paid = _apply(tmp_path, "--retry-uncertain")
        assert paid.returncode == 0, paid.stdout + paid.stderr
        assert len(_chats(server)) == 2
        assert _chats(server)[0] == _chats(server)[1]


def test_a_step_timeout_during_a_comfyui_job_reattaches_and_never_queues_it_again(
    tmp_path: Path,
) -> None:
    """ComfyUI's job outlives the step's timeout: each retry re-attaches to the journaled
    prompt instead of queuing (and paying for) the same work again."""
    from tests.providers.comfy_server import ComfyUIServer
    from tests.providers.test_e2e_jobqueues import _comfy_config

    (tmp_path / "pipeline.yaml").write_text(
        textwrap.dedent(
            """\
            runner: 1
            name: slowimage
            steps:
              gen:
                uses: image
                retries: 4
                timeout: 0.6
                with: {prompt: "a lighthouse at dusk", n: 1, seed: 5, size: 64x48}
            """
        ),
        encoding="utf-8",
    )
    with ComfyUIServer(render_s=1.5) as server:
        _comfy_config(tmp_path, server.url, timeout=60)
        done = _apply(tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert server.count("POST", "/prompt") == 1
        assert sum(server.executions.values()) == 1
        assert "step's timeout fired after 0.6s" in done.stdout + done.stderr


def test_a_reviewers_words_reach_the_model_as_the_reviewers_not_as_a_failure(
    tmp_path: Path,
) -> None:
    from runner.steps.llm import FEEDBACK_HEADING, REVIEW_HEADING, with_feedback

    asked = [{"role": "user", "content": "Draft the report."}]
    out = with_feedback(asked, [], ["reviewer feedback: shorter"])
    expected = f"Draft the report.\n\n{REVIEW_HEADING}\n- reviewer feedback: shorter"
    assert out[-1]["content"] == expected
    assert FEEDBACK_HEADING not in out[-1]["content"]
    both = with_feedback(asked, ["the reply must say FIXED"], ["reviewer feedback: shorter"])
    assert both[-1]["content"].endswith(f"{FEEDBACK_HEADING}\n- the reply must say FIXED")
    assert REVIEW_HEADING in both[-1]["content"]
