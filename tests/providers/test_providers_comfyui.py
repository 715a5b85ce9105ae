"""The comfyui provider against a loopback ComfyUI that queues, validates and executes like one."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from runner.errors import Failure, ProviderError
from runner.providers import ImageRequest, ProviderConfigError, create
from runner.providers.base import Provider
from runner.providers.calls import with_provider_retries
from runner.providers.jobs import RemoteJob
from tests.providers.comfy_server import ComfyUIServer
from tests.providers.faults import FAULTS, TIMEOUT, Fault, check_fault
from tests.providers.servers import Reply, png

DATA = Path(__file__).parent.parent / "data" / "comfyui"
SD15 = {
    "prompt": "6.inputs.text",
    "negative_prompt": "7.inputs.text",
    "seed": "3.inputs.seed",
    "width": "5.inputs.width",
    "height": "5.inputs.height",
}


def provider(
    tmp_path: Path,
    server: ComfyUIServer,
    workflow: str = "sd15_api.json",
    subs: Mapping[str, Any] = SD15,
    **settings: Any,
) -> Provider:
    (tmp_path / "flows").mkdir(exist_ok=True)
    shutil.copy(DATA / workflow, tmp_path / "flows" / workflow)
    return create(
        "comfyui",
        {
            "base_url": server.url,
            "workflow": f"flows/{workflow}",
            "substitutions": dict(subs),
            "poll_interval": 0.01,
            "timeout": 5,
            **settings,
        },
        base_dir=tmp_path,
    )


def graph_file(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / name).read_text())
    return data


def run(p: Provider, request: ImageRequest) -> Any:
    return asyncio.run(p.generate_image(request))


def test_sd15_graph_is_filled_queued_under_its_own_id_and_fetched(tmp_path: Path) -> None:
    with ComfyUIServer() as server:
        p = provider(tmp_path, server)
        req = ImageRequest(prompt="a canyon", seed=11, size=(768, 432), idempotency_key="k1")
        result = run(p, req)
        [(pid, graph)] = server.graphs.items()
        body = server.requests[0].json()
    original = graph_file("sd15_api.json")
    assert graph["6"]["inputs"]["text"] == "a canyon"
    assert graph["3"]["inputs"]["seed"] == 11
    assert (graph["5"]["inputs"]["width"], graph["5"]["inputs"]["height"]) == (768, 432)
    # No negative prompt given: the workflow's own stays; untouched nodes are as exported.
    assert graph["7"] == original["7"] and graph["4"] == original["4"]
    assert body["prompt_id"] == pid == result.metadata["prompt_id"]
    # The call's own client id (ComfyUI sends a prompt's /ws messages to one socket per id).
    assert body["client_id"].startswith("runner-") and body["client_id"] != "runner"
    assert result.image.startswith(b"\x89PNG") and result.metadata["seed"] == 11
    assert server.executions == {pid: 1}


def test_prompt_ids_follow_the_idempotency_key(tmp_path: Path) -> None:
    with ComfyUIServer() as server:
        p = provider(tmp_path, server)
        a = run(p, ImageRequest(prompt="x", seed=1, idempotency_key="same"))
        b = run(p, ImageRequest(prompt="x", seed=1, idempotency_key="other"))
    assert a.metadata["prompt_id"] != b.metadata["prompt_id"]
    again = provider(tmp_path, server)._prompt_id("same", 0)  # type: ignore[attr-defined]
    assert again == a.metadata["prompt_id"]


def test_flux_seed_goes_to_random_noise(tmp_path: Path) -> None:
    subs = {
        "prompt": "6.inputs.text",
        "seed": "25.inputs.noise_seed",
        "width": "27.inputs.width",
        "height": "27.inputs.height",
    }
    with ComfyUIServer() as server:
        p = provider(tmp_path, server, "flux_api.json", subs)
        run(p, ImageRequest(prompt="fox", seed=5, size=(512, 768)))
        [graph] = server.graphs.values()
    assert graph["25"]["inputs"]["noise_seed"] == 5
    assert graph["27"]["inputs"]["width"] == 512 and graph["6"]["inputs"]["text"] == "fox"


def test_one_field_into_several_paths(tmp_path: Path) -> None:
    subs = {"prompt": ["6.inputs.text_g", "6.inputs.text_l"], "seed": "3.inputs.seed"}
    with ComfyUIServer() as server:
        p = provider(tmp_path, server, "sdxl_api.json", subs)
        run(p, ImageRequest(prompt="harbour at night", seed=2))
        [graph] = server.graphs.values()
    assert graph["6"]["inputs"]["text_g"] == graph["6"]["inputs"]["text_l"] == "harbour at night"
    # width/height are not mapped: the workflow's latent size stays.
    assert graph["5"]["inputs"]["width"] == 1024


def test_img2img_reference_is_uploaded_into_its_load_image_node(tmp_path: Path) -> None:
    ref = png((5, 6, 7))
    subs = {"prompt": "6.inputs.text", "reference": ["10.inputs.image"]}
    with ComfyUIServer() as server:
        p = provider(tmp_path, server, "img2img_api.json", subs)
        assert p.capabilities.supports_reference_image
        run(p, ImageRequest(prompt="x", seed=1, references=[ref]))
        [graph] = server.graphs.values()
        uploads = dict(server.inputs)
    [(name, data)] = uploads.items()
    assert data == ref and graph["10"]["inputs"]["image"] == name


def test_without_the_upload_comfyui_refuses_the_load_image_value(tmp_path: Path) -> None:
    subs = {"prompt": "6.inputs.text"}
    with ComfyUIServer() as server:
        p = provider(tmp_path, server, "img2img_api.json", subs)
        with pytest.raises(ProviderError) as info:
            run(p, ImageRequest(prompt="x"))
    assert not info.value.transient and info.value.status == 400
    assert (
        "Prompt outputs failed validation; node 10 (LoadImage): Custom validation failed for "
        "node: image - Invalid image file: example.png"
    ) in info.value.message


def test_value_not_in_list_names_node_and_input(tmp_path: Path) -> None:
    flow = graph_file("sd15_api.json")
    flow["4"]["inputs"]["ckpt_name"] = "missing.safetensors"
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "bad.json").write_text(json.dumps(flow))
    with ComfyUIServer() as server:
        p = create(
            "comfyui",
            {"base_url": server.url, "workflow": "flows/bad.json", "substitutions": SD15},
            base_dir=tmp_path,
        )
        with pytest.raises(ProviderError) as info:
            run(p, ImageRequest(prompt="x"))
        assert server.total_executions() == 0
    assert (
        "HTTP 400: Prompt outputs failed validation; node 4 (CheckpointLoaderSimple): Value not "
        "in list: ckpt_name: 'missing.safetensors' not in"
    ) in info.value.message


def test_missing_node_type_is_comfyuis_own_words(tmp_path: Path) -> None:
    flow = graph_file("sd15_api.json")
    flow["12"] = {"class_type": "UltimateSDUpscale", "inputs": {}, "_meta": {"title": "Upscale"}}
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "custom.json").write_text(json.dumps(flow))
    with ComfyUIServer() as server:
        p = create(
            "comfyui",
            {"base_url": server.url, "workflow": "flows/custom.json", "substitutions": SD15},
            base_dir=tmp_path,
        )
        with pytest.raises(ProviderError) as info:
            run(p, ImageRequest(prompt="x"))
    assert (
        "Node 'Upscale' not found. The custom node may not be installed. (Node ID '#12')"
        in info.value.message
    )


def test_execution_error_is_permanent_and_the_next_call_submits_anew(tmp_path: Path) -> None:
    with ComfyUIServer() as server:
        p = provider(tmp_path, server)
        job = RemoteJob("k")
        with pytest.raises(ProviderError) as info:
            run(p, ImageRequest(prompt="[[OOM]] x", seed=1, idempotency_key="k", job=job))
        assert job.known is not None and job.known["state"] == "failed"
        first = job.known["prompt_id"]
        assert not info.value.transient
        assert (
            "workflow failed: node 3 (KSampler): Allocation on device [torch.OutOfMemoryError]"
            in info.value.message
        )
        with pytest.raises(ProviderError):
            run(p, ImageRequest(prompt="[[OOM]] x", seed=1, idempotency_key="k", job=job))
        assert job.known["prompt_id"] != first and server.executions[first] == 1


def test_timeout_shorter_than_the_render_runs_the_job_exactly_once(tmp_path: Path) -> None:
    with ComfyUIServer(render_s=0.8) as server:
        p = provider(tmp_path, server, timeout=0.2, max_retries=8, retry_base_delay=0.05)
        req = ImageRequest(prompt="slow", seed=3, idempotency_key="slow-1")
        waits: list[str] = []
        result = asyncio.run(
            with_provider_retries(
                p,
                lambda: p.generate_image(req),
                on_retry=lambda _a, exc, _d: waits.append(exc.message),
            )
        )
        server.wait_idle()
        assert server.count("POST", "/prompt") == 1
        assert server.total_executions() == 1
    assert waits and "still running" in waits[0] and "re-attaches" in waits[0]
    assert result.metadata["reattached"] is True


def test_a_job_left_behind_is_fetched_not_queued_again(tmp_path: Path) -> None:
    with ComfyUIServer(render_s=0.3) as server:
        p = provider(tmp_path, server, timeout=0.05)
        journal: list[dict[str, Any] | None] = []
        job = RemoteJob("k2", recorder=lambda j: journal.append(dict(j) if j else None))
        req = ImageRequest(prompt="left", seed=1, idempotency_key="k2", job=job)
        with pytest.raises(ProviderError, match=r"still (queued|running)"):
            run(p, req)
        server.wait_idle()  # the client gave up; ComfyUI finished the job anyway
        # A new process: only the journaled record is known.
        later = RemoteJob("k2", known=journal[-1])
        result = run(
            provider(tmp_path, server),
            ImageRequest(prompt="left", seed=1, idempotency_key="k2", job=later),
        )
        assert server.count("POST", "/prompt") == 1 and server.total_executions() == 1
    assert journal[0] is not None and journal[0]["state"] == "submitting"
    assert journal[0]["backend"] == server.url
    assert result.metadata["prompt_id"] == journal[0]["prompt_id"]


def test_the_job_is_journaled_before_it_is_sent(tmp_path: Path) -> None:
    with ComfyUIServer() as server:
        p = provider(tmp_path, server)
        sent_when_recorded: list[int] = []
        job = RemoteJob(
            "k3", recorder=lambda _j: sent_when_recorded.append(server.count("POST", "/prompt"))
        )
        run(p, ImageRequest(prompt="x", idempotency_key="k3", job=job))
    assert sent_when_recorded[0] == 0  # "submitting" was journaled before POST /prompt


def test_a_job_the_backend_forgot_is_submitted_again(tmp_path: Path) -> None:
    with ComfyUIServer(render_s=0.3) as server:
        p = provider(tmp_path, server, timeout=0.05)
        job = RemoteJob("k4")
        req = ImageRequest(prompt="x", seed=1, idempotency_key="k4", job=job)
        with pytest.raises(ProviderError):
            run(p, req)
        server.wait_idle()
        server.restart()  # history gone: the backend no longer knows the job
        said: list[str] = []
        again = RemoteJob("k4", known=job.known, progress=said.append)
        req = ImageRequest(prompt="x", seed=1, idempotency_key="k4", job=again)
        result = run(provider(tmp_path, server), req)
        assert server.count("POST", "/prompt") == 2
    # Asked first, submitted only when unknown: a new submission, never called re-attached.
    assert result.metadata["reattached"] is False
    assert any("no longer knows prompt" in line and "submitting it again" in line for line in said)
    assert not any("re-attached" in line for line in said), said


def test_an_older_comfyui_that_picks_its_own_id_gets_that_id_journaled(tmp_path: Path) -> None:
    with ComfyUIServer(honour_prompt_id=False) as server:
        p = provider(tmp_path, server)
        job = RemoteJob("k5")
        result = run(p, ImageRequest(prompt="x", idempotency_key="k5", job=job))
        [pid] = server.graphs
    assert job.known is not None and job.known["prompt_id"] == pid
    assert result.metadata["prompt_id"] == pid


@pytest.mark.parametrize("fault", FAULTS, ids=str)
def test_error_replies_are_classified(tmp_path: Path, fault: Fault) -> None:
    # A lost reply to POST /prompt is not "maybe executed" for a job queue: the next attempt
    # asks ComfyUI about the journaled prompt_id and submits only if ComfyUI does not have it.
    if fault.failure is Failure.MAYBE_EXECUTED:
        fault = dataclasses.replace(fault, failure=Failure.TRANSIENT)
    with ComfyUIServer() as server:
        p = provider(tmp_path, server, timeout=TIMEOUT)
        req = ImageRequest(prompt="x", seed=1, idempotency_key="f")
        check_fault(server, "POST", "/prompt", lambda: p.generate_image(req), fault)
        # However the reply was lost, the backend ran the prompt once.
        server.wait_idle()
        assert server.total_executions() <= 1


# --- compile-time checks ------------------------------------------------------------------------


def check(
    tmp_path: Path, workflow: str, subs: Mapping[str, Any], references: int | None = 0
) -> None:
    (tmp_path / "flows").mkdir(exist_ok=True)
    shutil.copy(DATA / workflow, tmp_path / "flows" / workflow)
    p = create(
        "comfyui",
        {"workflow": f"flows/{workflow}", "substitutions": dict(subs)},
        base_dir=tmp_path,
    )
    p.check(references=references)


def test_ui_format_is_recognised_with_how_to_export(tmp_path: Path) -> None:
    with pytest.raises(ProviderConfigError) as info:
        check(tmp_path, "sd15_ui.json", {"prompt": "6.inputs.text"})
    assert "sd15_ui.json is a ComfyUI UI-format workflow (it has 'nodes' and 'links')" in str(
        info.value
    )
    assert info.value.hint is not None and "Export (API)" in info.value.hint


def test_a_saved_request_body_is_unwrapped(tmp_path: Path) -> None:
    check(tmp_path, "sd15_wrapped.json", SD15)


@pytest.mark.parametrize(
    ("subs", "message"),
    [
        ({"prompt": "66.inputs.text"}, "the workflow has no node '66'; did you mean '6'?"),
        (
            {"prompt": "6.inputs.txt"},
            "node '6' (CLIP Text Encode (Prompt)) has no input 'txt'; did you mean 'text'?",
        ),
        ({"prompt": "6.inputs.clip"}, "input 'clip' of node '6' (CLIP Text Encode (Prompt)) is"),
        ({"prompt": "6.inputs.text", "sed": "3.inputs.seed"}, "field 'sed'; did you mean 'seed'"),
        ({"negative_prompt": "7.inputs.text"}, "must name where 'prompt' goes"),
        ({"prompt": "6.inputs.text", "reference": "3.inputs.seed"}, "is not a LoadImage node"),
    ],
)
def test_substitution_mistakes_name_the_nearest_fix(
    tmp_path: Path, subs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ProviderConfigError) as info:
        check(tmp_path, "sd15_api.json", subs)
    assert message in info.value.message


def test_more_references_than_load_image_nodes_is_refused(tmp_path: Path) -> None:
    subs = {"prompt": "6.inputs.text", "reference": "10.inputs.image"}
    check(tmp_path, "img2img_api.json", subs, references=1)
    with pytest.raises(ProviderConfigError, match="gives 2 reference images but the workflow"):
        check(tmp_path, "img2img_api.json", subs, references=2)


def test_progress_says_where_the_job_stands(tmp_path: Path) -> None:
    lines: dict[str, list[str]] = {"a": [], "b": []}
    with ComfyUIServer(render_s=0.3) as server:
        p = provider(tmp_path, server, max_concurrency=2)

        async def both() -> None:
            await asyncio.gather(
                *(
                    p.generate_image(
                        ImageRequest(
                            prompt=name,
                            idempotency_key=name,
                            job=RemoteJob(name, progress=lines[name].append),
                        )
                    )
                    for name in ("a", "b")
                )
            )

        asyncio.run(both())
    first, second = sorted(lines.values(), key=lambda said: "queued (1 ahead)" in str(said))
    assert any(line.endswith(f"running on {server.url}") for line in first)
    assert any("queued (1 ahead)" in line for line in second)
    assert all(said[-1].endswith("done") for said in lines.values())


def test_a_prompt_interrupted_on_the_server_says_so(tmp_path: Path) -> None:
    """Cancel in ComfyUI's UI (POST /interrupt): execution_interrupted, not an execution error."""
    import threading
    import time

    import httpx

    with ComfyUIServer(render_s=1.0) as server:
        p = provider(tmp_path, server)
        job = RemoteJob("k-int")

        def cancel() -> None:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not any(
                event == "progress" for event, _d, _s in list(server.ws.sent)
            ):
                time.sleep(0.01)  # until the sampler runs
            # Another client's prompt_id interrupts nothing; ours stops the render.
            httpx.post(f"{server.url}/interrupt", json={"prompt_id": "someone-else"})
            httpx.post(f"{server.url}/interrupt", json={"prompt_id": job.known["prompt_id"]})  # type: ignore[index]

        helper = threading.Thread(target=cancel)
        helper.start()
        with pytest.raises(ProviderError) as info:
            run(p, ImageRequest(prompt="a gate", seed=1, idempotency_key="k-int", job=job))
        helper.join()
        [entry] = server.history.values()
    assert "the prompt was interrupted on the server at node 3 (KSampler)" in info.value.message
    assert not info.value.transient and job.known is not None and job.known["state"] == "failed"
    assert entry["status"]["status_str"] == "error" and not entry["status"]["completed"]
    assert [m[0] for m in entry["status"]["messages"]][-1] == "execution_interrupted"


def test_a_prompt_deleted_from_the_queue_is_not_submitted_again(tmp_path: Path) -> None:
    """A user takes the prompt out of ComfyUI's queue (POST /queue delete) while it waits behind
    another: it never ran and ComfyUI keeps no trace of it. The call fails saying so, rather
    than silently queuing (and paying for) it again; the next apply submits it anew."""
    import threading
    import time

    import httpx

    with ComfyUIServer(render_s=0.6) as server:
        blocker = httpx.post(f"{server.url}/prompt", json={"prompt": graph_file("sd15_api.json")})
        assert blocker.status_code == 200
        p = provider(tmp_path, server)
        job = RemoteJob("k-del")
        deleted: list[str] = []

        def delete_ours() -> None:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                pid = (job.known or {}).get("prompt_id")
                with server._wake:
                    pending = [item[1] for item in server.pending]
                if pid in pending:
                    time.sleep(0.05)  # the provider has seen it queued
                    httpx.post(f"{server.url}/queue", json={"delete": [pid]})
                    deleted.append(str(pid))
                    return
                time.sleep(0.005)

        helper = threading.Thread(target=delete_ours)
        helper.start()
        req = ImageRequest(prompt="deleted", seed=1, idempotency_key="k-del", job=job)
        with pytest.raises(ProviderError) as info:
            run(p, req)
        helper.join()
        server.wait_idle()
        [pid] = deleted
        assert server.count("POST", "/prompt") == 2  # the blocker and ours, once
        assert server.executions[pid] == 0 and pid not in server.history
        assert not info.value.transient and job.known is not None
        assert job.known["state"] == "failed"
        assert f"prompt {pid} was deleted from the queue of {server.url} before it ran" in (
            info.value.message
        )
        assert "apply again to submit it anew" in info.value.message
        # The next apply (the user asked again): a new submission under a new id, run once.
        result = run(provider(tmp_path, server), req)
        assert server.count("POST", "/prompt") == 3
        assert result.metadata["prompt_id"] != pid and server.executions[pid] == 0


def test_an_accepted_prompt_with_node_errors_says_what_will_not_run(tmp_path: Path) -> None:
    """ComfyUI accepts a prompt whose other outputs fail validation and runs only the valid
    ones ({prompt_id, number, node_errors}): the user is told which node will not run, and why,
    in ComfyUI's words."""
    graph = graph_file("sd15_api.json")
    graph["10"] = {"class_type": "PreviewImage", "inputs": {}}  # its images input is missing
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "two_outputs.json").write_text(json.dumps(graph))
    said: list[str] = []
    with ComfyUIServer() as server:
        p = create(
            "comfyui",
            {
                "base_url": server.url,
                "workflow": "flows/two_outputs.json",
                "substitutions": dict(SD15),
                "poll_interval": 0.01,
                "timeout": 5,
            },
            base_dir=tmp_path,
        )
        job = RemoteJob("k-ne", progress=said.append)
        result = run(p, ImageRequest(prompt="x", seed=1, idempotency_key="k-ne", job=job))
        [queued] = [item for item in server.graphs]
    assert result.image.startswith(b"\x89PNG")
    dropped = "node 10 (PreviewImage): Required input is missing: images"
    assert any(
        line == f"ComfyUI accepted prompt {queued} but will not run: {dropped}" for line in said
    )
    assert job.known is not None and job.known["dropped"] == [dropped]


def test_a_workflow_that_makes_a_batch_per_job_is_refused(tmp_path: Path) -> None:
    """Issue 28: batch_size 3 kept the first image of each job and dropped two silently."""
    graph = json.loads((DATA / "sd15_api.json").read_text(encoding="utf-8"))
    latent = next(n for n in graph.values() if "batch_size" in n.get("inputs", {}))
    latent["inputs"]["batch_size"] = 3
    with ComfyUIServer() as server:
        p = provider(tmp_path, server)
        (tmp_path / "flows" / "sd15_api.json").write_text(json.dumps(graph), encoding="utf-8")
        with pytest.raises(ProviderConfigError, match="batch_size 3 images per job") as info:
            p.check(references=0)
        assert "n: 3" in (info.value.hint or "")
        assert server.count("POST", "/prompt") == 0


def test_a_job_that_saved_several_images_fails_rather_than_dropping_them(tmp_path: Path) -> None:
    """The same when the batch is not a literal the check can read: the reply is refused."""
    with ComfyUIServer() as server:
        p = provider(tmp_path, server)
        job = RemoteJob("k9", known={"prompt_id": "p1"})
        entry = {
            "status": {"status_str": "success", "completed": True, "messages": []},
            "outputs": {
                "9": {
                    "images": [
                        {"filename": f"ComfyUI_0000{i}_.png", "subfolder": "", "type": "output"}
                        for i in range(1, 4)
                    ]
                }
            },
        }
        with pytest.raises(ProviderError, match="saved 3 images for one call") as info:
            p._finished(job, entry, "/history/p1")
        assert not info.value.transient and job.known and job.known["state"] == "failed"


def test_a_prompt_comfyui_never_accepted_is_submitted_not_looked_for(tmp_path: Path) -> None:
    # POST /prompt answered an error: ComfyUI never took the prompt, so the next attempt does
    # not ask /history about it (its error named a history entry of a prompt never accepted).
    with ComfyUIServer() as server:
        server.queue("POST", "/prompt", Reply(503, {"error": "starting up"}))
        p = provider(tmp_path, server)
        job = RemoteJob("k9")
        with pytest.raises(ProviderError, match="HTTP 503"):
            run(p, ImageRequest(prompt="x", seed=1, idempotency_key="k9", job=job))
        assert job.known is not None and job.known["state"] == "unsent"
        again = RemoteJob("k9", known=job.known)
        run(provider(tmp_path, server), ImageRequest(prompt="x", seed=1, idempotency_key="k9", job=again))
        first_look = next(i for i, r in enumerate(server.requests) if r.path.startswith("/history"))
        posts = [i for i, r in enumerate(server.requests) if r.method == "POST" and r.path == "/prompt"]
    assert len(posts) == 2 and posts[1] < first_look
