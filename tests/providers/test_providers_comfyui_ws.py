"""ComfyUI progress over its /ws websocket, against the loopback ComfyUI's own socket.

The socket is a hint: the job's end is confirmed by GET /history, a backend without /ws or a
socket that drops leaves the wait to polling, and nothing is ever submitted twice.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from runner.errors import ProviderError
from runner.providers import ImageRequest
from runner.providers.comfyui_ws import ws_url
from runner.providers.jobs import RemoteJob
from tests.providers.comfy_server import ComfyUIServer
from tests.providers.test_providers_comfyui import provider, run

STEP_LINE = re.compile(r"prompt (\S+) running on (\S+): (\d+)/(\d+) steps \(node (\S+)\)")


def _job(key: str) -> tuple[RemoteJob, list[str]]:
    lines: list[str] = []
    return RemoteJob(key, progress=lines.append), lines


def _steps(lines: list[str]) -> list[tuple[int, int, str]]:
    found = [STEP_LINE.fullmatch(line) for line in lines]
    return [(int(m[3]), int(m[4]), m[5]) for m in found if m]


def test_progress_arrives_over_the_websocket_and_history_confirms_the_end(
    tmp_path: Path,
) -> None:
    with ComfyUIServer(render_s=0.4) as server:
        p = provider(tmp_path, server)  # sd15_api.json: KSampler (node 3), 20 steps
        job, lines = _job("k-progress")
        result = run(
            p, ImageRequest(prompt="a pier", seed=3, idempotency_key="k-progress", job=job)
        )
        [handshake] = server.socket_requests
        [body] = [r.json() for r in server.requests if r.path == "/prompt"]
        history_gets = server.count("GET", f"/history/{result.metadata['prompt_id']}")
        sent_to_us = [e for e, _d, sid in server.ws.sent if sid == body["client_id"]]
        previews = server.ws.previews
    # The socket listened under the id the prompt was queued with, opened before the POST.
    assert handshake.query["clientId"] == [body["client_id"]]
    assert body["client_id"].startswith("runner-") and body["client_id"] != "runner"
    steps = _steps(lines)
    assert steps[0][1:] == (20, "3") and steps[-1] == (20, 20, "3")
    values = [v for v, _m, _n in steps]
    assert values == sorted(values) and 2 <= len(values) <= 11  # one line per tenth, not per step
    # The server sent every step and a preview frame after each (binary, skipped by the client).
    assert sent_to_us.count("progress") == 20 and previews == 20
    assert sent_to_us[-1] == "executing"  # node null: after the history entry was written
    assert server.executions[result.metadata["prompt_id"]] == 1
    # Woken by the socket, not by polling every 10 ms over a 0.4 s render.
    assert 1 <= history_gets <= 4
    assert lines[-1] == f"prompt {result.metadata['prompt_id']} done"


def test_two_calls_at_once_each_get_their_own_progress(tmp_path: Path) -> None:
    with ComfyUIServer(render_s=0.2) as server:
        p = provider(tmp_path, server)
        (job_a, lines_a), (job_b, lines_b) = _job("k-a"), _job("k-b")

        async def both() -> None:
            await asyncio.gather(
                p.generate_image(
                    ImageRequest(prompt="a", seed=1, idempotency_key="k-a", job=job_a)
                ),
                p.generate_image(
                    ImageRequest(prompt="b", seed=2, idempotency_key="k-b", job=job_b)
                ),
            )

        asyncio.run(both())
        ids = {r.query["clientId"][0] for r in server.socket_requests}
    assert len(ids) == 2  # one socket per call: ComfyUI keeps a single socket per client id
    assert _steps(lines_a)[-1] == (20, 20, "3") and _steps(lines_b)[-1] == (20, 20, "3")
    assert {job_a.known["prompt_id"], job_b.known["prompt_id"]} == set(server.executions)  # type: ignore[index]


def test_a_socket_that_drops_mid_job_leaves_the_wait_to_polling(tmp_path: Path) -> None:
    with ComfyUIServer(render_s=0.6) as server:
        server.ws.drop_after_progress = 5  # cut after 5 of the 20 steps
        p = provider(tmp_path, server)
        job, lines = _job("k-drop")
        result = run(p, ImageRequest(prompt="a dune", seed=4, idempotency_key="k-drop", job=job))
        pid = result.metadata["prompt_id"]
        posts = server.count("POST", "/prompt")
        sent = [e for e, _d, _s in server.ws.sent if e == "progress"]
    assert result.image.startswith(b"\x89PNG")
    assert posts == 1 and server.executions[pid] == 1  # completed by polling, never re-sent
    steps = _steps(lines)
    assert steps and steps[-1][0] <= 5 < len(sent)  # progress stopped with the socket


def test_a_backend_without_the_websocket_is_polled(tmp_path: Path) -> None:
    with ComfyUIServer(render_s=0.2, websocket=False) as server:
        p = provider(tmp_path, server)
        job, lines = _job("k-nows")
        result = run(p, ImageRequest(prompt="a moor", seed=5, idempotency_key="k-nows", job=job))
        polls = server.count("GET", f"/history/{result.metadata['prompt_id']}")
        attempts = server.socket_requests
        refused = [r for r in server.requests if r.path == "/ws"]
    assert attempts == [] and len(refused) == 1  # asked once, answered 404, then polled
    assert _steps(lines) == [] and polls >= 1  # the result came from polling /history
    assert server.count("POST", "/prompt") == 1


def test_websocket_false_never_opens_one(tmp_path: Path) -> None:
    with ComfyUIServer(render_s=0.05) as server:
        p = provider(tmp_path, server, websocket=False)
        run(p, ImageRequest(prompt="x", seed=1, idempotency_key="k-off"))
        assert server.socket_requests == []
        assert "websocket" not in json.dumps(p.profile_settings())


def test_a_reattached_job_listens_under_the_id_it_was_queued_with(tmp_path: Path) -> None:
    with ComfyUIServer(render_s=0.5) as server:
        p = provider(tmp_path, server, timeout=0.15)
        job = RemoteJob("k-again")
        req = ImageRequest(prompt="a weir", seed=6, idempotency_key="k-again", job=job)
        with pytest.raises(ProviderError, match="re-attaches"):
            run(p, req)  # the wait runs out; the job keeps running on the server
        assert job.known is not None
        queued_as = job.known["client_id"]
        # A new process: only the journaled record, a fresh provider and a fresh job object.
        lines: list[str] = []
        again = RemoteJob("k-again", job.known, progress=lines.append)
        p2 = provider(tmp_path, server, timeout=5)
        result = run(
            p2, ImageRequest(prompt="a weir", seed=6, idempotency_key="k-again", job=again)
        )
        ids = [r.query["clientId"][0] for r in server.socket_requests]
    assert ids == [queued_as, queued_as]
    assert (
        server.count("POST", "/prompt") == 1
        and server.executions[result.metadata["prompt_id"]] == 1
    )
    assert lines[-1].endswith("done (re-attached)")


def test_ws_url_keeps_a_path_prefix_and_quotes_the_id() -> None:
    assert ws_url("http://h:8188", "runner-1") == "ws://h:8188/ws?clientId=runner-1"
    assert ws_url("https://h/comfy/", "a b") == "wss://h/comfy/ws?clientId=a%20b"
