"""Never paid twice: a call whose reply was lost after it was sent is not sent again by default.

Acceptance over real sockets: the OpenAI double generates (and bills) every request that reaches
it, whatever Idempotency-Key it carries, and counts the generations it completed. The provider's
read timeout is shorter than the server's work, so each reply is lost after the work was done.
"""

from __future__ import annotations

import json
import textwrap

from tests.conftest import Project
from tests.providers.openai_server import OpenAIServer

WORK_S = 0.5  # the server's time per generation
TIMEOUT = 0.2  # the client's read timeout: shorter than the work

PIPELINE = """\
runner: 1
name: paid
steps:
  caption:
    uses: llm
    with:
      prompt: "Caption a red fox in snow"
    check:
      - {matches: {value: "${{ output.text }}", pattern: "^echo: Caption"}}
  picture:
    uses: image
    with: {prompt: "a red fox in snow", n: 1, size: 32x32}
"""


def configure(project: Project, url: str, *, retry_uncertain: bool = False) -> None:
    project.write(
        "runner.toml",
        textwrap.dedent(
            f"""\
            [general]
            default_provider = "openai"

            [providers.openai]
            base_url = "{url}/v1"
            timeout = {TIMEOUT}
            max_retries = 3
            retry_base_delay = 0
            retry_uncertain = {"true" if retry_uncertain else "false"}
            """
        ),
    )


def test_a_lost_reply_is_billed_once_and_sent_again_only_when_the_user_says_so(
    project: Project,
) -> None:
    project.write("pipeline.yaml", PIPELINE)
    with OpenAIServer(work_s=WORK_S) as server:
        configure(project, server.url)
        first = project.apply()
        assert first["_exit"] != 0
        # Each call reached the server once and was generated (billed) once; none was re-sent.
        assert server.settled() == 2 and len(server.requests) == 2
        run_id = first["run"]["id"]
        show = project.cli("runs", "show", run_id, "--json").json
        calls = {c["step_id"]: c for c in show["calls"]}
        for step in ("caption", "picture"):
            call = calls[step]
            assert call["outcome"] == "maybe_executed" and call["submitted"]
            assert call["attempts"] == 1 and call["remote_id"] is None
            assert "may have completed (and billed) it" in call["error"]
        failures = {s["id"]: s.get("reason") or "" for s in first["steps"]}
        assert "no reply within 0.2 s (read timeout)" in failures["caption"]
        assert "retry_uncertain = true in [providers.openai]" in failures["caption"]
        text = project.cli("runs", "show", run_id).stdout
        assert "maybe_executed" in text and "Provider calls" in text

        # The next apply does not send them again: the user has not said so.
        again = project.apply()
        assert again["_exit"] != 0 and server.settled() == 2 and len(server.requests) == 2
        reason = {s["id"]: s.get("reason") or "" for s in again["steps"]}["caption"]
        assert "may have been completed and billed by the backend" in reason
        assert "it is not sent again" in reason

        # The user accepts paying twice; the server is quick now, so the calls complete.
        server.work_s = 0.0
        configure(project, server.url, retry_uncertain=True)
        done = project.apply()
        assert done["_exit"] == 0, done
        assert server.settled() == 4 and len(server.requests) == 4
        show = project.cli("runs", "show", done["run"]["id"], "--json").json
        for call in show["calls"]:
            assert call["outcome"] == "completed" and call["attempts"] == 2
        caption = next(c for c in show["calls"] if c["step_id"] == "caption")
        assert caption["remote_id"].startswith("chatcmpl-")


def test_the_retry_uncertain_flag_resends_for_one_apply(project: Project) -> None:
    project.write("pipeline.yaml", PIPELINE)
    with OpenAIServer(work_s=WORK_S) as server:
        configure(project, server.url)
        assert project.apply()["_exit"] != 0 and server.settled() == 2
        server.work_s = 0.0
        done = project.apply("--retry-uncertain")
        assert done["_exit"] == 0 and server.settled() == 4
        # Completed now: a later apply reuses the replies and pays for nothing.
        assert project.apply()["_exit"] == 0 and server.settled() == 4


def test_retry_uncertain_also_retries_within_the_apply(project: Project) -> None:
    project.write("pipeline.yaml", PIPELINE.split("  picture:")[0])
    with OpenAIServer(work_s=WORK_S) as server:
        configure(project, server.url, retry_uncertain=True)
        doc = project.apply()
        # max_retries = 3: four sends, each generated and billed, the user having accepted it.
        assert doc["_exit"] != 0 and server.settled() == 4 and len(server.requests) == 4
        show = project.cli("runs", "show", doc["run"]["id"], "--json").json
        [call] = show["calls"]
        assert call["attempts"] == 4 and json.dumps(call["outcome"]) == '"maybe_executed"'
