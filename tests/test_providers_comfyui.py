"""The comfyui provider against a local server speaking /prompt, /history, /view, /upload."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from runner.errors import ProviderError
from runner.providers import ImageRequest, ProviderConfigError, create
from runner.providers.base import Provider
from tests.providers.faults import FAULTS, TIMEOUT, Fault, check_fault
from tests.providers.servers import ComfyUIServer, Reply, png

WORKFLOW = {
    "3": {"class_type": "KSampler", "inputs": {"seed": 0, "steps": 20, "model": ["4", 0]}},
    "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "sd.safetensors"}},
    "5": {"class_type": "EmptyLatentImage", "inputs": {"width": 512, "height": 512}},
    "6": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["4", 1]}},
    "10": {"class_type": "LoadImage", "inputs": {"image": ""}},
    "9": {"class_type": "SaveImage", "inputs": {"images": ["8", 0]}},
}
SUBS = {
    "prompt": "6.inputs.text",
    "seed": "3.inputs.seed",
    "width": "5.inputs.width",
    "height": "5.inputs.height",
    "reference": "10.inputs.image",
}


def provider(
    tmp_path: Path, server: ComfyUIServer, graph: dict[str, Any] | None = None, **settings: Any
) -> Provider:
    (tmp_path / "flows").mkdir(exist_ok=True)
    (tmp_path / "flows" / "wf.json").write_text(json.dumps(graph or WORKFLOW))
    return create(
        "comfyui",
        {
            "base_url": server.url,
            "workflow": "flows/wf.json",
            "substitutions": SUBS,
            "poll_interval": 0.01,
            "timeout": TIMEOUT,
            **settings,
        },
        base_dir=tmp_path,
    )


def test_queue_poll_and_fetch_with_substitutions(tmp_path: Path) -> None:
    with ComfyUIServer(pending_polls=2) as server:
        p = provider(tmp_path, server)
        result = asyncio.run(
            p.generate_image(ImageRequest(prompt="a canyon", seed=11, size=(768, 432)))
        )
        [graph] = server.prompts.values()
        paths = [r.path for r in server.requests]
    assert graph["6"]["inputs"]["text"] == "a canyon"
    assert graph["3"]["inputs"]["seed"] == 11
    assert (graph["5"]["inputs"]["width"], graph["5"]["inputs"]["height"]) == (768, 432)
    assert graph["4"] == WORKFLOW["4"]  # untouched nodes stay as the user wrote them
    assert paths[0] == "/prompt" and paths[-1] == "/view"
    assert sum(p.startswith("/history/") for p in paths) == 3  # two pending, then done
    assert result.image.startswith(b"\x89PNG") and result.metadata["seed"] == 11


def test_reference_is_uploaded_and_substituted(tmp_path: Path) -> None:
    ref = png((5, 6, 7))
    with ComfyUIServer(pending_polls=0) as server:
        p = provider(tmp_path, server)
        assert p.capabilities.supports_reference_image
        asyncio.run(p.generate_image(ImageRequest(prompt="x", seed=1, references=[ref])))
        [graph] = server.prompts.values()
        [(name, data)] = server.uploads.items()
    assert data == ref and graph["10"]["inputs"]["image"] == name


def test_profile_follows_the_workflow_content_not_its_path(tmp_path: Path) -> None:
    with ComfyUIServer() as server:
        before = provider(tmp_path, server).profile()
        changed = dict(
            WORKFLOW,
            **{
                "4": {
                    "class_type": "CheckpointLoaderSimple",
                    "inputs": {"ckpt_name": "other.safetensors"},
                }
            },
        )
        assert provider(tmp_path, server, changed).profile() != before
        assert provider(tmp_path, server).profile() == before


def test_node_errors_reach_the_user(tmp_path: Path) -> None:
    broken = {"6": {"inputs": {"text": ""}}}
    with ComfyUIServer() as server:
        p = provider(tmp_path, server, broken, substitutions={"prompt": "6.inputs.text"})
        with pytest.raises(ProviderError) as info:
            asyncio.run(p.generate_image(ImageRequest(prompt="x")))
    assert not info.value.transient and info.value.status == 400
    assert "Cannot execute because a node is invalid" in info.value.message
    assert "missing class_type" in info.value.message


def test_execution_error_in_history_is_permanent(tmp_path: Path) -> None:
    with ComfyUIServer() as server:
        p = provider(tmp_path, server)
        server.queue(
            "POST", "/prompt", Reply(body={"prompt_id": "p1", "number": 1, "node_errors": {}})
        )
        server.queue(
            "GET",
            "/history/p1",
            Reply(
                body={
                    "p1": {
                        "outputs": {},
                        "status": {
                            "status_str": "error",
                            "completed": False,
                            "messages": [
                                [
                                    "execution_error",
                                    {
                                        "node_type": "KSampler",
                                        "exception_message": "CUDA out of memory",
                                    },
                                ]
                            ],
                        },
                    }
                }
            ),
        )
        with pytest.raises(ProviderError, match="KSampler: CUDA out of memory") as info:
            asyncio.run(p.generate_image(ImageRequest(prompt="x", seed=1)))
    assert not info.value.transient


def test_a_prompt_that_never_finishes_times_out_transiently(tmp_path: Path) -> None:
    with ComfyUIServer(pending_polls=10_000) as server:
        p = provider(tmp_path, server, timeout=0.2)
        with pytest.raises(ProviderError, match=r"not finished within 0\.2 s") as info:
            asyncio.run(p.generate_image(ImageRequest(prompt="x", seed=1)))
    assert info.value.transient


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"substitutions": {"prompt": "99.inputs.text"}}, "names no node"),
        (
            {"substitutions": {"colour": "6.inputs.text", "prompt": "6.inputs.text"}},
            "unknown substitution",
        ),
        ({"workflow": "flows/missing.json"}, "cannot read"),
    ],
)
def test_configuration_mistakes_are_clear(
    tmp_path: Path, settings: dict[str, Any], message: str
) -> None:
    with ComfyUIServer() as server:
        p = provider(tmp_path, server, **settings)
        with pytest.raises(ProviderConfigError, match=message):
            asyncio.run(p.generate_image(ImageRequest(prompt="x")))
        assert server.requests == []


@pytest.mark.parametrize("fault", FAULTS, ids=str)
def test_error_replies_are_classified(tmp_path: Path, fault: Fault) -> None:
    with ComfyUIServer(pending_polls=0) as server:
        p = provider(tmp_path, server)
        req = ImageRequest(prompt="x", seed=1)
        check_fault(server, "POST", "/prompt", lambda: p.generate_image(req), fault)
