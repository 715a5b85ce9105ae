"""Live: the llm step against llama.cpp's real OpenAI-compatible server (llama-cpp-python).

The model is a tiny random-weight GGUF (make_gguf.py): its replies are gibberish, but the
protocol, the sampling with a seed, the grammar behind `format: json` and `schema:`, stop strings
and the server's own errors are the real server's. A counting proxy in front of it tells how many
requests reached it and how many were in flight at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .kit import Run, executions, runner, start_runner, write
from .proxy import CountingProxy
from .servers import Server, http_json

pytestmark = pytest.mark.live


def config(root: Path, url: str, **extra: Any) -> None:
    settings = {
        "type": "openai", "base_url": f"{url}/v1", "model": "tiny", "timeout": 60,
        "retry_base_delay": 0.05, "retry_max_delay": 0.2, **extra,
    }
    lines = "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
    write(root, "runner.toml", f'[general]\ndefault_provider = "llama"\n\n[providers.llama]\n{lines}')


def pipeline(root: Path, step: str, *, name: str = "pipeline.yaml") -> None:
    write(root, name, "runner: 1\nname: live\nsteps:\n" + step)


@pytest.fixture
def proxy(llama: Server) -> Iterator[CountingProxy]:
    with CountingProxy(llama.port) as p:
        yield p


def direct(url: str, **body: Any) -> dict[str, Any]:
    """One chat completion asked directly, as any other client would."""
    reply: dict[str, Any] = http_json(f"{url}/v1/chat/completions", {"model": "tiny", **body})
    return reply


ASK = """\
  ask:
    uses: llm
    with:
      prompt: "Say something."
      seed: 42
      temperature: 0.9
      max_tokens: 24
    check:
      - {expr: "output.text | length > 0"}
"""


def test_plain_reply_equals_a_direct_request_and_reapply_sends_nothing(
    tmp_path: Path, llama: Server, proxy: CountingProxy
) -> None:
    config(tmp_path, proxy.url)
    pipeline(tmp_path, ASK)
    first = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert first.code == 0, first.stderr
    assert proxy.requests == 1
    [ask] = executions(tmp_path, first.doc["run"]["id"], "ask")
    # The same request sent by hand, with the same seed, gets the same words: the seed reached
    # the server and nothing else in runner's request changed the sampling.
    same = direct(
        llama.url,
        messages=[{"role": "user", "content": "Say something."}],
        seed=42, temperature=0.9, max_tokens=24,
    )
    assert ask["output"]["text"] == same["choices"][0]["message"]["content"]
    assert ask["output"]["usage"]["completion_tokens"] == same["usage"]["completion_tokens"]
    again = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert again.code == 0, again.stderr
    assert again.statuses()["ask"] == "cached"
    assert proxy.requests == 1  # re-apply: 0 calls


def test_for_each_at_concurrency_4_has_4_calls_in_flight(
    tmp_path: Path, proxy: CountingProxy
) -> None:
    config(tmp_path, proxy.url, max_concurrency=4)
    pipeline(
        tmp_path,
        """\
  ask:
    uses: llm
    for_each: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    concurrency: 4
    with:
      prompt: "Item ${{ item }}."
      seed: "${{ item }}"
      max_tokens: 200
      params: {logit_bias: {"2": -100}}
    check:
      - {expr: "output.text | length > 0"}
""",
    )
    run = runner(tmp_path, "apply", "pipeline.yaml", "--json", "--jobs", "8")
    assert run.code == 0, run.stderr
    assert proxy.requests == 12
    assert proxy.max_open == 4, proxy.max_open  # as configured: never fewer, never more
    texts = [e["output"]["text"] for e in executions(tmp_path, run.doc["run"]["id"], "ask")]
    assert len(set(texts)) == 12  # each element its own seed, its own reply


def test_format_json_parses_what_the_json_grammar_made(
    tmp_path: Path, proxy: CountingProxy
) -> None:
    config(tmp_path, proxy.url)
    pipeline(
        tmp_path,
        """\
  ask:
    uses: llm
    with:
      prompt: "Give a JSON object."
      format: json
      seed: 7
      max_tokens: 200
      # Random weights rarely close a string; "}" (token 352 of make_gguf's vocabulary) made
      # likely lets the JSON grammar end the object.
      params: {logit_bias: {"352": 12}}
    check:
      - {expr: "output.json is not none"}
""",
    )
    run = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert run.code == 0, run.stderr
    [ask] = executions(tmp_path, run.doc["run"]["id"], "ask")
    assert ask["output"]["json"] == json.loads(ask["output"]["text"])


SCHEMA_STEP = """\
  ask:
    uses: llm
    with:
      prompt: "Label it."
      seed: 3
      max_tokens: 60
      schema:
        type: object
        additionalProperties: false
        required: [label]
        properties: {label: {enum: [invoice, letter, report]}}
    check:
      - {choice_in: {value: "${{ output.json.label }}", choices: [invoice, letter, report]}}
"""


def test_schema_reaches_llama_cpp_in_the_form_it_takes(
    tmp_path: Path, proxy: CountingProxy
) -> None:
    # llama-cpp-python refuses response_format {type: json_schema} with an HTTP 500 ("Input
    # should be 'text' or 'json_object'") and takes {type: json_object, schema}: runner sends
    # that form, so the grammar holds the gibberish model to the schema. One request only.
    config(tmp_path, proxy.url)
    pipeline(tmp_path, SCHEMA_STEP)
    run = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert run.code == 0, run.stderr
    [ask] = executions(tmp_path, run.doc["run"]["id"], "ask")
    assert ask["output"]["json"]["label"] in ("invoice", "letter", "report")
    assert set(ask["output"]["json"]) == {"label"}
    assert proxy.requests == 1


def test_the_form_set_by_hand_is_kept_and_its_refusal_said_once(
    tmp_path: Path, proxy: CountingProxy
) -> None:
    # structured_output set by hand is sent as set: llama.cpp's HTTP 500 names the request as
    # invalid, so it is a user error, said once in the server's words, not three requests.
    config(tmp_path, proxy.url, structured_output="json_schema")
    pipeline(tmp_path, SCHEMA_STEP)
    run = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert run.code != 0
    assert proxy.requests == 1
    [ask] = executions(tmp_path, run.doc["run"]["id"], "ask")
    assert "Input should be 'text' or 'json_object'" in ask["error"], ask["error"]
    assert "names the request as invalid" in ask["error"], ask["error"]


def test_a_500_that_names_the_request_invalid_is_not_retried(
    tmp_path: Path, proxy: CountingProxy
) -> None:
    config(tmp_path, proxy.url)
    pipeline(
        tmp_path,
        """\
  ask:
    uses: llm
    with:
      prompt: "Hello."
      max_tokens: 8
      params: {response_format: {type: yaml}}
    check:
      - {expr: "true"}
""",
    )
    run = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert run.code != 0
    assert proxy.requests == 1  # not the retry policy's 4
    [ask] = executions(tmp_path, run.doc["run"]["id"], "ask")
    assert "HTTP 500" in ask["error"] and "Input should be" in ask["error"], ask["error"]


def test_stop_ends_the_reply_where_the_server_stops(
    tmp_path: Path, llama: Server, proxy: CountingProxy
) -> None:
    ask = {"messages": [{"role": "user", "content": "Go."}], "seed": 5, "max_tokens": 40}
    full = direct(llama.url, **ask)["choices"][0]["message"]["content"]
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    assert len(full) > 6 and stop.strip(), full
    config(tmp_path, proxy.url)
    pipeline(
        tmp_path,
        f"""\
  ask:
    uses: llm
    with:
      prompt: "Go."
      seed: 5
      max_tokens: 40
      params: {{stop: [{json.dumps(stop)}]}}
    check:
      - {{expr: "true"}}
""",
    )
    run = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert run.code == 0, run.stderr
    [out] = executions(tmp_path, run.doc["run"]["id"], "ask")
    assert out["output"]["text"] == full[: full.index(stop)]


def test_a_timeout_shorter_than_the_generation_is_never_sent_blindly_again(
    tmp_path: Path, proxy: CountingProxy
) -> None:
    config(tmp_path, proxy.url, timeout=0.3)
    pipeline(
        tmp_path,
        """\
  ask:
    uses: llm
    with:
      prompt: "Write on."
      seed: 9
      max_tokens: 1900
      params: {logit_bias: {"2": -100}}
    check:
      - {expr: "true"}
""",
    )
    first = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert first.code != 0
    [ask] = executions(tmp_path, first.doc["run"]["id"], "ask")
    assert "may have completed" in ask["error"], ask["error"]
    again = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert again.code != 0
    # The server got the request once: neither the retries nor the next apply sent it blindly.
    assert proxy.requests == 1
    [ask] = executions(tmp_path, again.doc["run"]["id"], "ask")
    assert "--retry-uncertain" in ask["error"], ask["error"]


def _answered(server: Server) -> int:
    """Chat completions the server answered, by its own access log (every start of it)."""
    return server.log.read_text(errors="replace").count('"POST /v1/chat/completions HTTP/1.1" 200')


def test_a_server_killed_mid_run_is_said_at_once_and_nothing_is_generated_twice(
    tmp_path: Path, llama: Server
) -> None:
    config(tmp_path, llama.url, max_concurrency=4)
    pipeline(
        tmp_path,
        """\
  ask:
    uses: llm
    for_each: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]
    concurrency: 4
    with:
      prompt: "Item ${{ item }}."
      seed: "${{ item }}"
      max_tokens: 250
      params: {logit_bias: {"2": -100}}
    check:
      - {expr: "output.text | length > 0"}
""",
    )
    before = _answered(llama)
    proc = start_runner(tmp_path, "apply", "pipeline.yaml", "--json", "--jobs", "8")
    try:
        deadline = time.monotonic() + 60
        while _answered(llama) < before + 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        llama.kill()
        time.sleep(3)  # long enough for the waiting calls to be refused and told
        llama.start()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    run = Run(proc.returncode, out, err)
    down = f"warning: backend {llama.url}/v1 (llama) down since "
    assert down in err and "probing every 1 s" in err, err
    assert f"warning: backend {llama.url}/v1 (llama) is back after " in err, err
    rows = executions(tmp_path, run.doc["run"]["id"], "ask")
    done = [r for r in rows if r["status"] == "completed"]
    lost = [r for r in rows if r["status"] != "completed"]
    # Those in flight at the kill (4, and one sent on a kept-alive connection the dying server
    # had just closed) may have been generated: failed, never sent blindly again.
    assert 1 <= len(lost) <= 8 and len(done) >= 8, [r["error"] for r in lost]
    assert all("may have completed" in str(r["error"]) for r in lost), [r["error"] for r in lost]
    assert len(done) + len(lost) == 16
    assert _answered(llama) - before == len(done)  # each completed element generated once


NEVER_PASSES = """\
  ask:
    uses: llm
    retries: 2
    with:
      prompt: "Say yes."
      seed: 11
      temperature: {temperature}
      max_tokens: 12
    check:
      # a message of its own: the check's reasons (the feedback) stay the same whatever the
      # model says, as a check that measures nothing of the reply would word them
      - {{expr: "output.text == 'a reply a random model never gives'", message: "say the phrase"}}
"""


def test_retries_with_unchanged_feedback_never_send_the_same_request_twice(
    tmp_path: Path, proxy: CountingProxy
) -> None:
    config(tmp_path, proxy.url)
    pipeline(tmp_path, NEVER_PASSES.format(temperature=0.9))
    run = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert run.code != 0
    first, second, third = proxy.bodies()
    # The check said the same thing twice: the third attempt carries the same feedback, so it
    # goes out with another seed rather than as the second attempt's very request.
    assert "Previous attempt failed because" in second["messages"][-1]["content"]
    assert second["messages"] == third["messages"]
    assert second != third and second["seed"] != third["seed"]
    assert len({json.dumps(b, sort_keys=True) for b in (first, second, third)}) == 3


def test_at_temperature_0_an_unchanged_feedback_stops_the_retries(
    tmp_path: Path, proxy: CountingProxy
) -> None:
    config(tmp_path, proxy.url)
    pipeline(tmp_path, NEVER_PASSES.format(temperature=0))
    run = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert run.code != 0
    assert proxy.requests == 2  # the third would be the second's request, and its reply
    [ask] = executions(tmp_path, run.doc["run"]["id"], "ask")
    assert "feedback did not change since check failure 1" in ask["error"], ask["error"]
