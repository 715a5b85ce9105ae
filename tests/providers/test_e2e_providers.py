"""End to end over real sockets: runner in a subprocess against local protocol servers.

Covers a SIGKILL in the middle of a paid image run (no completed call is ever paid twice), the
API key never reaching disk or output, and a third-party provider found through an entry point.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PIL import Image

from tests.conftest import runner_bin
from tests.providers.keyed import CountingOpenAIServer
from tests.providers.openai_server import OpenAIServer
from tests.providers.servers import Reply

SECRET = "sk-e2e-Zq7xW3vK9pL2mN8rT4yU6hJ1"


def _config(root: Path, url: str) -> None:
    (root / "runner.toml").write_text(
        textwrap.dedent(
            f"""\
            [general]
            default_provider = "openai"

            [providers.openai]
            base_url = "{url}/v1"
            model = "test-chat"
            image_model = "test-image"
            api_key_env = "TEST_OPENAI_KEY"
            max_concurrency = 1
            timeout = 10
            retry_base_delay = 0.05
            retry_max_delay = 0.1
            """
        ),
        encoding="utf-8",
    )


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    env.update(NO_COLOR="1", TEST_OPENAI_KEY=SECRET, **extra)
    return env


def _run(
    root: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*runner_bin(), *args],
        cwd=root,
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _wait(cond: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def _logged_responses(state: Path) -> int:
    """Calls the client has recorded as completed (the call log's response line follows it)."""
    return sum(
        f.read_text(encoding="utf-8").count('"event": "response"')
        for f in state.glob("logs/runs/*/*.out")
    )


EIGHT = """\
runner: 1
name: eight
steps:
  generate:
    uses: image
    with:
      prompt: "a lighthouse at dusk"
      n: 8
      size: 64x48
      concurrency: 1
"""


def test_sigkill_mid_run_never_pays_twice_for_a_completed_image(tmp_path: Path) -> None:
    (tmp_path / "pipeline.yaml").write_text(EIGHT, encoding="utf-8")
    cmd = ("apply", "pipeline.yaml", "--json", "-q")
    server = CountingOpenAIServer(delay=0.3, hold_after=3)
    with server:
        _config(tmp_path, server.url)
        proc = subprocess.Popen(
            [*runner_bin(), *cmd],
            cwd=tmp_path,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # Three completed and recorded by the client, the fourth on the wire (held).
            _wait(
                lambda: (
                    server.total_completed() == 3
                    and server.received_count() == 4
                    and _logged_responses(tmp_path / ".runner") == 3
                ),
                "three recorded generations and a fourth in flight",
            )
            assert server.total_completed() == 3
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            assert proc.stdout is not None and proc.stderr is not None
            proc.stdout.close()
            proc.stderr.close()
        assert proc.returncode == -signal.SIGKILL
        server.release(abort=True)  # the held generation never completes
        in_flight = server.received[3]
        before_kill = list(server.received[:3])

        # The call on the wire at the kill may have been completed and billed: the next apply
        # makes every other image but does not send that one again...
        res = _run(tmp_path, *cmd)
        doc: dict[str, Any] = json.loads(res.stdout)
        assert doc["exit_code"] == 6 and doc["run"]["status"] == "partial", doc
        assert server.total_completed() == 7 and server.received.count(in_flight) == 1
        show = json.loads(_run(tmp_path, "runs", "show", doc["run"]["id"], "--json").stdout)
        [refused] = [it for it in show["iterations"] if it["status"] != "completed"]
        assert "may have been completed and billed" in refused["error"]
        assert "runner apply --retry-uncertain" in refused["error"]
        # ...until the user says so.
        res = _run(tmp_path, *cmd, "--retry-uncertain")
        doc = json.loads(res.stdout)
        assert doc.get("exit_code") == 0, doc
        show = json.loads(_run(tmp_path, "runs", "show", doc["run"]["id"], "--json").stdout)
        [resent] = show["calls"]  # the only call this run made
        assert resent["key"] == in_flight and resent["outcome"] == "completed"
        assert resent["submitted"] and resent["attempts"] == 2  # once before the kill, once now

        assert server.total_completed() == 8
        assert len(server.completed) == 8 and set(server.completed.values()) == {1}
        for key in before_kill:
            assert server.received.count(key) == 1, f"completed key {key} was sent again"
        # the only key allowed twice on the wire is the one in flight at the kill
        repeats = {k for k in server.received if server.received.count(k) > 1}
        assert repeats <= {in_flight}
        assert len(server.received) == 9  # 3 + the held one + the 5 still to make
        assert all(r.headers.get("authorization") == f"Bearer {SECRET}" for r in server.requests)


SECRETIVE = """\
runner: 1
name: secretive
steps:
  pictures:
    uses: image
    with: {prompt: "a red fox in snow", n: 2, size: 64x48, concurrency: 1}
  caption:
    uses: llm
    with:
      prompt: "Caption a red fox in snow"
    check:
      - {matches: {value: "${{ output.text }}", pattern: "^echo: Caption"}}
"""


def test_api_key_never_reaches_disk_or_output(tmp_path: Path) -> None:
    (tmp_path / "pipeline.yaml").write_text(SECRETIVE, encoding="utf-8")
    with OpenAIServer() as server:
        _config(tmp_path, server.url)
        # Backends do echo credentials in error bodies; both must be masked wherever they go.
        server.queue(
            "POST",
            "/v1/images/generations",
            Reply(400, {"error": {"message": f"Incorrect API key provided: {SECRET}."}}),
        )
        server.queue(
            "POST",
            "/v1/chat/completions",
            Reply(500, {"error": f"upstream saw Authorization: Bearer {SECRET}"}),
        )
        first = _run(tmp_path, "apply", "pipeline.yaml", "--json", "--events", "events.jsonl")
        again = _run(tmp_path, "apply", "pipeline.yaml", "--json")
        doc = json.loads(first.stdout)
        shown = _run(tmp_path, "runs", "show", doc["run"]["id"], "--json")
        listed = _run(tmp_path, "runs", "list", "--json")
    assert server.count("POST", "/v1/chat/completions") == 2  # the 500, then the answer
    # 2 on the first apply (one refused with 400); the re-apply retries only the failed one
    assert server.count("POST", "/v1/images/generations") == 3
    assert json.loads(again.stdout)["exit_code"] == 0, again.stdout
    assert all(r.headers.get("authorization") == f"Bearer {SECRET}" for r in server.requests)
    assert doc["exit_code"] == first.returncode == 6, first.stderr
    text = first.stdout + first.stderr
    assert "Incorrect API key provided: ***" in text  # the reason survives, the key does not
    outputs = [first, again, shown, listed]
    for res in outputs:
        assert SECRET not in res.stdout and SECRET not in res.stderr
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "journal.db" for p in files)
    assert any(p.suffix == ".err" for p in files)  # the failed attempts were logged
    assert (tmp_path / "events.jsonl").stat().st_size > 0
    masked = [p.name for p in files if b"Incorrect API key provided: ***" in p.read_bytes()]
    assert "journal.db" in masked or "journal.db-wal" in masked, masked
    leaked = [p for p in files if SECRET.encode() in p.read_bytes()]
    assert leaked == []


PLUGIN = '''\
"""A third-party provider: echoes the prompt as text, draws a grey square as an image."""

import io

from PIL import Image

from runner.providers.base import Capabilities, ImageResult, Provider, TextResult


class Echo(Provider):
    key = "echo"
    version = "1"
    description = "echoes prompts back (test plugin)"
    default_capabilities = Capabilities(kinds=frozenset({"image", "text"}), supports_seed=True)
    known_settings = frozenset({"shout"})

    async def generate_text(self, request):
        text = "ECHO " + request.messages[-1]["content"]
        return TextResult(text=text.upper() if self.settings.get("shout") else text)

    async def generate_image(self, request):
        buf = io.BytesIO()
        Image.new("RGB", request.size, (request.seed or 0, 128, 128)).save(buf, "PNG")
        return ImageResult(image=buf.getvalue(), metadata={"seed": request.seed})
'''

USES_ECHO = """\
runner: 1
name: echoing
steps:
  say:
    uses: llm
    with: {provider: echo, prompt: "hello plugin"}
    check:
      - {matches: {value: "${{ output.text }}", pattern: "^ECHO hello plugin$"}}
  draw:
    uses: image
    with: {provider: echo, prompt: "a square", n: 2, size: 32x32, seed: 7}
"""


def test_entry_point_provider_is_listed_and_runs(tmp_path: Path) -> None:
    site = tmp_path / "site"
    dist = site / "echo_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / "echo_plugin.py").write_text(PLUGIN, encoding="utf-8")
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: echo-plugin\nVersion: 0.1\n", encoding="utf-8"
    )
    (dist / "entry_points.txt").write_text(
        "[runner.providers]\necho = echo_plugin:Echo\n", encoding="utf-8"
    )
    project = tmp_path / "project"
    project.mkdir()
    (project / "pipeline.yaml").write_text(USES_ECHO, encoding="utf-8")
    env = _env(PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))

    listed = _run(project, "providers", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    by_name = {p["name"]: p for p in json.loads(listed.stdout)["providers"]}
    assert "fake" in by_name and "echo" in by_name
    assert by_name["echo"]["capabilities"]["kinds"] == ["image", "text"]
    plain = json.loads(_run(project, "providers", "--json").stdout)["providers"]
    assert "echo" not in {p["name"] for p in plain}  # only the plugin's dist-info adds it

    res = _run(project, "apply", "pipeline.yaml", "--json", env=env)
    doc = json.loads(res.stdout)
    assert res.returncode == 0 and doc["exit_code"] == 0, res.stderr
    assert {s["id"]: s["status"] for s in doc["steps"]} == {"say": "ran", "draw": "ran"}
    # the check on `say` held, so the reply was the plugin's; the images are the plugin's too
    assert [it["seed"] for it in doc["iterations"]] == [7, 8]
    for it in doc["iterations"]:
        raw = it["assets"]["raw"]
        with Image.open(project / ".runner" / "objects" / raw[:2] / raw[2:]) as img:
            assert img.size == (32, 32) and img.getpixel((0, 0)) == (it["seed"], 128, 128)


# A body far larger than what the two sockets' buffers hold: the client cannot have sent it in
# full (nor journaled anything it does after that) before the backend starts reading.
ONE = (
    EIGHT.replace("name: eight", "name: one")
    .replace("n: 8", "n: 1")
    .replace("a lighthouse at dusk", "a lighthouse at dusk " * 400_000)
)


def _first_byte_then_drop(state: Path, seen: list[int], connections: list[int]) -> socket.socket:
    """A backend that, the moment the first byte of a request arrives, reads the journal's
    record of the call, then takes the whole request and drops the connection unanswered."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            connections.append(1)
            with conn:
                if not conn.recv(1):
                    continue
                db = sqlite3.connect(f"file:{state / 'journal.db'}?mode=ro", uri=True)
                try:
                    query = "SELECT count(*) FROM calls WHERE submitted_at IS NOT NULL"
                    seen.append(db.execute(query).fetchone()[0])
                finally:
                    db.close()
                conn.settimeout(0.5)  # take the rest of the request, then hang up
                with contextlib.suppress(OSError):
                    while conn.recv(65536):
                        pass

    threading.Thread(target=serve, daemon=True).start()
    return listener


def test_a_call_is_journaled_as_sent_before_its_first_byte_reaches_the_backend(
    tmp_path: Path,
) -> None:
    # A kill between the backend receiving a request and the journal saying so would make the
    # next apply pay again: the journal must say "sent" before the backend holds a byte.
    (tmp_path / "pipeline.yaml").write_text(ONE, encoding="utf-8")
    seen: list[int] = []
    connections: list[int] = []
    listener = _first_byte_then_drop(tmp_path / ".runner", seen, connections)
    try:
        _config(tmp_path, f"http://127.0.0.1:{listener.getsockname()[1]}")
        first = _run(tmp_path, "apply", "pipeline.yaml", "--json", "-q")
        assert seen == [1], (seen, first.stderr)
        doc = json.loads(first.stdout)
        assert doc["exit_code"] != 0
        again = json.loads(_run(tmp_path, "apply", "pipeline.yaml", "--json", "-q").stdout)
        assert again["exit_code"] != 0 and len(connections) == 1  # not sent again
        show = json.loads(_run(tmp_path, "runs", "show", again["run"]["id"], "--json").stdout)
        [refused] = [it for it in show["iterations"] if it["status"] != "completed"]
        assert "may have been completed and billed" in refused["error"]
    finally:
        listener.close()
