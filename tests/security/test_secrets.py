"""Provider keys never reach stderr, --json, events, logs, the journal or the object store, and
commands steps run do not inherit them unless the step asks.

Classes (each list below is the corpus; add members as they are found):
- CUT: a key in a backend's error at every offset around the cuts (the 600-character message,
  the 200-character excerpt of a non-JSON reply), through a real `runner apply` process against
  a loopback OpenAI-compatible server; no 8-character piece of the key may survive anywhere;
- ECHO: a reply (text, metadata) that repeats the key is masked before it is stored;
- ENV: shell steps and exec checks get neither the variables providers read keys from nor
  credential-looking ones, unless named in `pass_env` (tests/security/test_step_environment.py:
  nothing but the base set and their own pass_env).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runner.source.redact import Redactor
from runner.source.secretenv import command_environment

from ..providers.openai_server import OpenAIServer
from ..providers.servers import Reply

KEY = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb7cDe0f"  # 48 characters
assert len(KEY) == 48


def _pieces(text: bytes) -> list[str]:
    """Every 8-character piece of KEY found in ``text``."""
    return [KEY[i : i + 8] for i in range(len(KEY) - 7) if KEY[i : i + 8].encode() in text]


def _config(root: Path, url: str, extra: str = "") -> None:
    (root / "runner.toml").write_text(
        textwrap.dedent(
            f"""\
            [general]
            default_provider = "openai"

            [providers.openai]
            base_url = "{url}/v1"
            model = "test-chat"
            api_key_env = "LLM_CRED_VAR"
            timeout = 10
            retry_base_delay = 0.01
            retry_max_delay = 0.02
            """
        )
        + extra,
        encoding="utf-8",
    )


LLM = """\
runner: 1
name: ask
steps:
  ask:
    uses: llm
    retries: 0
    with: {prompt: "say hi"}
    check: ["${{ steps.ask.output.text | length > 0 }}"]
"""


def _apply(
    root: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    full.update({"NO_COLOR": "1", "LLM_CRED_VAR": KEY, **(env or {})})
    return subprocess.run(
        [sys.executable, "-m", "runner", *args],
        cwd=root,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _everything(root: Path, done: subprocess.CompletedProcess[str]) -> list[tuple[str, bytes]]:
    """Every place a secret could land: the outputs of the apply and `runs show`/events, and
    every file under the state directory (journal and WAL, logs, objects, run files)."""
    places = [("stderr", done.stderr.encode()), ("stdout", done.stdout.encode())]
    run_id = json.loads(done.stdout)["run"]["id"] if done.stdout.strip() else None
    if run_id:
        for cmd in (["runs", "show", run_id, "--json"], ["runs", "events", run_id, "--json"]):
            shown = _apply(root, *cmd)
            places.append((" ".join(cmd), (shown.stdout + shown.stderr).encode()))
    for path in (root / ".runner").rglob("*"):
        if path.is_file():
            places.append((str(path.relative_to(root)), path.read_bytes()))
    return places


def _no_key(root: Path, done: subprocess.CompletedProcess[str]) -> None:
    leaks = {where: _pieces(data) for where, data in _everything(root, done)}
    assert not {k: v for k, v in leaks.items() if v}, leaks


ERROR_OFFSETS = [0, 300, 560, 566, 580, 593, 599, 600, 601, 1000, 5000]


@pytest.mark.parametrize("offset", ERROR_OFFSETS)
def test_a_key_in_a_backend_error_never_leaks_whatever_the_cut(tmp_path: Path, offset: int) -> None:
    (tmp_path / "pipeline.yaml").write_text(LLM)
    message = "A" * offset + KEY + " was rejected"
    with OpenAIServer() as server:
        _config(tmp_path, server.url)
        server.queue(
            "POST",
            "/v1/chat/completions",
            Reply(400, {"error": {"message": message, "type": "invalid_request_error"}}),
        )
        done = _apply(tmp_path, "apply", "pipeline.yaml", "--json")
    assert done.returncode != 0
    assert (
        "HTTP 400" in done.stderr and "was rejected" in done.stderr + done.stdout
    ) or offset > 500
    _no_key(tmp_path, done)


NON_JSON_OFFSETS = [0, 150, 180, 190, 199, 200, 400]


@pytest.mark.parametrize("offset", NON_JSON_OFFSETS)
def test_a_key_in_a_non_json_reply_never_leaks(tmp_path: Path, offset: int) -> None:
    (tmp_path / "pipeline.yaml").write_text(LLM)
    body = ("B" * offset + KEY + " trailing words").encode()
    with OpenAIServer() as server:
        _config(tmp_path, server.url)
        server.queue("POST", "/v1/chat/completions", Reply(200, body, content_type="text/plain"))
        done = _apply(tmp_path, "apply", "pipeline.yaml", "--json")
    assert done.returncode != 0
    _no_key(tmp_path, done)


ECHOES = [
    KEY,
    f"your key is {KEY}.",
    f"Authorization: Bearer {KEY}",
    f'{{"api_key": "{KEY}"}}',
    KEY[:30] + "\n" + KEY,
]


@pytest.mark.parametrize("echo", ECHOES, ids=range(len(ECHOES)))
def test_a_reply_echoing_the_key_is_masked_before_it_is_stored(tmp_path: Path, echo: str) -> None:
    (tmp_path / "pipeline.yaml").write_text(LLM)
    reply = {
        "id": "c1",
        "model": f"test-chat {KEY}",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": echo}}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    }
    with OpenAIServer() as server:
        _config(tmp_path, server.url)
        server.queue("POST", "/v1/chat/completions", Reply(200, reply))
        done = _apply(tmp_path, "apply", "pipeline.yaml", "--json")
    assert done.returncode == 0, done.stderr
    _no_key(tmp_path, done)


ENV_PIPELINE = """\
runner: 1
name: envs
steps:
  plain: {uses: shell, with: {run: "env > out/plain.txt", outputs: [out/plain.txt]}}
  asked:
    uses: shell
    with:
      run: "env > out/asked.txt"
      outputs: [out/asked.txt]
      pass_env: [LLM_CRED_VAR, GH_TOKEN]
  checked:
    uses: shell
    with: {run: "true"}
    check:
      - exec: {run: 'test -z "$LLM_CRED_VAR$OTHER_API_KEY$A1111_PW$DB_PASSWORD$GH_TOKEN"'}
      - exec: {run: 'test "$LLM_CRED_VAR" = "$EXPECT"', pass_env: [LLM_CRED_VAR],
               env: {EXPECT: "${{ 'sk-proj-' }}"}}
"""

WITHHELD = {
    "LLM_CRED_VAR": KEY,  # named by the provider's api_key_env (no credential-like name)
    "A1111_PW": "pw-" + "x" * 20,  # named by password_env
    "OTHER_API_KEY": "other-key-value-123",
    "DB_PASSWORD": "hunter2hunter2",
    "GH_TOKEN": "ghp_tokenvalue123456",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-value-1234",
    "RUNNER_SERVE_TOKEN": "serve-token-value-1234",
}


def test_commands_do_not_inherit_secrets_unless_asked(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "pipeline.yaml").write_text(ENV_PIPELINE.replace("'sk-proj-'", repr(KEY)))
    extra = """
[providers.sd]
type = "a1111"
base_url = "http://127.0.0.1:9"
username_env = "A1111_USER"
password_env = "A1111_PW"
"""
    _config(tmp_path, "http://127.0.0.1:9", extra)
    env = {**WITHHELD, "A1111_USER": "someone", "PLAIN_SETTING": "kept"}
    done = _apply(tmp_path, "apply", "pipeline.yaml", "--json", env=env)
    assert done.returncode == 0, done.stderr
    plain = (tmp_path / "out" / "plain.txt").read_text()
    # Only the base set: a plain variable runner was given is not passed on unless asked.
    assert "PLAIN_SETTING" not in plain and "PATH=" in plain
    for name, value in WITHHELD.items():
        assert f"{name}=" not in plain and value not in plain, name
    asked = (tmp_path / "out" / "asked.txt").read_text()
    assert f"LLM_CRED_VAR={KEY}" in asked and "GH_TOKEN=ghp_tokenvalue123456" in asked
    assert "DB_PASSWORD" not in asked


def test_the_step_env_it_writes_itself_is_kept() -> None:
    env = command_environment(
        {"MY_TOKEN": "given"}, base={"MY_TOKEN": "inherited", "A": "1", "PATH": "/bin"}
    )
    assert env == {"MY_TOKEN": "given", "PATH": "/bin"}


def test_a_change_to_runners_environment_is_seen_by_the_next_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each command's environment is built from runner's as it is now: a variable set or
    changed after the first command reaches the next when it is asked for, and only then."""
    monkeypatch.delenv("LATE_API_KEY", raising=False)
    monkeypatch.setenv("TZ", "UTC")
    first = command_environment(named={"NAMED_ONLY"})
    first["SCRIBBLED"] = "on the copy"  # every caller gets its own dict
    monkeypatch.setenv("LATE_API_KEY", "late-secret-value")
    monkeypatch.setenv("TZ", "Europe/Paris")
    second = command_environment(named={"NAMED_ONLY"})
    assert "SCRIBBLED" not in second and second["TZ"] == "Europe/Paris"
    assert "LATE_API_KEY" not in second
    asked = command_environment(pass_env=["LATE_API_KEY"], named={"NAMED_ONLY"})
    assert asked["LATE_API_KEY"] == "late-secret-value"
    monkeypatch.delenv("TZ")
    assert "TZ" not in command_environment(named={"NAMED_ONLY"})


CUTS = [(KEY, 10), (KEY, 20), ("x" * 5 + KEY, 30), (KEY + "tail", 47), ("pre " + KEY, 25)]


@pytest.mark.parametrize(("text", "limit"), CUTS)
def test_clip_redacts_before_it_cuts(text: str, limit: int) -> None:
    clipped = Redactor([KEY]).clip(text, limit)
    assert not _pieces(clipped.encode()) and len(clipped) <= limit


@pytest.mark.parametrize("n", [6, 10, 20, 47])
def test_a_cut_key_at_either_end_is_masked_too(n: int) -> None:
    red = Redactor([KEY])
    assert KEY[:n] not in red.redact("error: " + KEY[:n])
    assert KEY[-n:] not in red.redact(KEY[-n:] + " rest")
