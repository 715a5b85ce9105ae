"""ComfyUI: queue a user-supplied API-format workflow, poll its history, fetch the image.

Settings: ``workflow`` (a JSON file exported with "Save (API format)", relative to runner.toml),
``substitutions`` mapping request fields (prompt, negative_prompt, seed, width, height, reference)
to paths in the workflow like "6.inputs.text" (node id, then keys), ``poll_interval`` seconds.
Protocol: POST /upload/image for references, POST /prompt {prompt, client_id} -> {prompt_id},
GET /history/{prompt_id} until outputs appear, GET /view?filename=&subfolder=&type= for bytes.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import time
from pathlib import Path
from typing import Any, ClassVar

import httpx

from ..errors import ProviderError
from ._http import HttpProvider
from .base import Capabilities, ImageRequest, ImageResult, ProviderConfigError

FIELDS = ("prompt", "negative_prompt", "seed", "width", "height", "reference")


class ComfyUIProvider(HttpProvider):
    """A ComfyUI server (default http://127.0.0.1:8188) running a workflow you supply."""

    key: ClassVar[str] = "comfyui"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "ComfyUI with a user-supplied API-format workflow"
    default_base_url: ClassVar[str] = "http://127.0.0.1:8188"
    default_capabilities: ClassVar[Capabilities] = Capabilities(
        kinds=frozenset({"image"}),
        supports_seed=True,
        supports_reference_image=False,  # true when the substitutions name a reference input
        max_concurrency=1,
        accepts_idempotency_key=False,
    )
    known_settings: ClassVar[frozenset[str]] = frozenset(
        {"base_url", "workflow", "substitutions", "poll_interval", "output_node", "client_id"}
    )
    defaults: ClassVar[dict[str, Any]] = {"poll_interval": 0.5, "client_id": "runner"}

    @property
    def capabilities(self) -> Capabilities:
        caps = super().capabilities
        subs = self.settings.get("substitutions")
        has_ref = isinstance(subs, dict) and "reference" in subs
        return Capabilities(
            kinds=caps.kinds,
            supports_seed=isinstance(subs, dict) and "seed" in subs,
            supports_reference_image=has_ref,
            max_concurrency=caps.max_concurrency,
            accepts_idempotency_key=False,
        )

    def _workflow_path(self) -> Path:
        name = self.settings.get("workflow")
        if not isinstance(name, str) or not name:
            raise ProviderConfigError(
                f"provider '{self.name}': setting 'workflow' (an API-format JSON file) is required"
            )
        return (self.base_dir / name).resolve()

    def _workflow(self) -> dict[str, Any]:
        path = self._workflow_path()
        try:
            graph = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            problem = f"cannot read {path}: {exc}"
        except ValueError as exc:
            problem = f"{path} is not JSON: {exc}"
        else:
            problem = ""
        if problem:
            raise ProviderConfigError(f"provider '{self.name}': {problem}")
        if not isinstance(graph, dict):
            raise ProviderConfigError(f"provider '{self.name}': {path} is not an API workflow")
        return graph

    def _substitutions(self) -> dict[str, str]:
        subs = self.settings.get("substitutions", {})
        if not isinstance(subs, dict) or not all(isinstance(v, str) for v in subs.values()):
            raise ProviderConfigError(
                f"provider '{self.name}': substitutions must map fields to 'node.key.key' paths"
            )
        unknown = sorted(set(subs) - set(FIELDS))
        if unknown:
            raise ProviderConfigError(
                f"provider '{self.name}': unknown substitution(s) {', '.join(unknown)}",
                hint=f"substitutable fields: {', '.join(FIELDS)}",
            )
        if "prompt" not in subs:
            raise ProviderConfigError(f"provider '{self.name}': substitutions must name 'prompt'")
        return dict(subs)

    def profile_settings(self) -> dict[str, Any]:
        # The workflow's content, not its path, decides the output.
        out = {
            k: v
            for k, v in super().profile_settings().items()
            if k not in ("poll_interval", "client_id", "workflow")
        }
        try:
            out["workflow_sha256"] = hashlib.sha256(self._workflow_path().read_bytes()).hexdigest()
        except (OSError, ProviderConfigError):
            out["workflow_sha256"] = None
        return out

    def _substitute(self, graph: dict[str, Any], path: str, value: Any) -> None:
        node_id, _, rest = path.partition(".")
        node = graph.get(node_id)
        keys = rest.split(".") if rest else []
        if not isinstance(node, dict) or not keys:
            raise ProviderConfigError(
                f"provider '{self.name}': substitution path '{path}' names no node in the workflow"
            )
        for k in keys[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
            if not isinstance(node, dict):
                raise ProviderConfigError(
                    f"provider '{self.name}': substitution path '{path}' does not exist"
                )
        node[keys[-1]] = value

    async def generate_image(self, request: ImageRequest) -> ImageResult:
        graph = copy.deepcopy(self._workflow())
        subs = self._substitutions()
        values: dict[str, Any] = {
            "prompt": request.prompt,
            "negative_prompt": request.negative_prompt,
            "seed": request.seed if request.seed is not None else 0,
            "width": request.size[0],
            "height": request.size[1],
        }
        timeout = request.timeout if request.timeout is not None else self.timeout
        async with self.client(timeout) as client:
            if "reference" in subs and request.references:
                values["reference"] = await self._upload(client, request.references[0])
            for field, path in subs.items():
                if field in values:
                    self._substitute(graph, path, values[field])
            body = {"prompt": graph, "client_id": self.str_setting("client_id", "runner")}
            queued = self.json_of(await self.send(client, "POST", "/prompt", json=body))
            prompt_id = queued.get("prompt_id")
            if not isinstance(prompt_id, str) or not prompt_id:
                raise self.bad_reply(
                    "POST /prompt",
                    f"no prompt_id (node_errors: {json.dumps(queued.get('node_errors'))})",
                )
            ref = await self._wait(client, prompt_id, timeout)
            resp = await self.send(client, "GET", "/view", params=ref)
        ctype = resp.headers.get("Content-Type", "")
        if not ctype.startswith("image/"):
            raise self.bad_reply("GET /view", f"content type '{ctype}' is not an image")
        meta = {
            "seed": values["seed"] if "seed" in subs else None,
            "model": None,
            "revised_prompt": None,
            "prompt_id": prompt_id,
            "filename": ref["filename"],
        }
        return ImageResult(image=resp.content, metadata=meta, usage={"images": 1})

    async def _upload(self, client: httpx.AsyncClient, data: bytes) -> str:
        name = f"runner-{hashlib.sha256(data).hexdigest()[:16]}.png"
        files = {"image": (name, data, "image/png")}
        reply = self.json_of(
            await self.send(
                client,
                "POST",
                "/upload/image",
                files=files,
                data={"overwrite": "true", "type": "input"},
            )
        )
        stored = reply.get("name")
        if not isinstance(stored, str):
            raise self.bad_reply("POST /upload/image", "no name in the reply")
        sub = reply.get("subfolder")
        return f"{sub}/{stored}" if isinstance(sub, str) and sub else stored

    async def _wait(
        self, client: httpx.AsyncClient, prompt_id: str, timeout: float
    ) -> dict[str, str]:
        """Poll the history until the prompt has an image output; returns /view parameters."""
        interval = self.float_setting("poll_interval", 0.5)
        deadline = time.monotonic() + timeout
        url = f"/history/{prompt_id}"
        while True:
            entry = self.json_of(await self.send(client, "GET", url)).get(prompt_id)
            if isinstance(entry, dict):
                found = self._finished(entry, url)
                if found is not None:
                    return found
            if time.monotonic() + interval > deadline:
                raise self.error(
                    f"GET {url}: prompt not finished within {timeout} s", transient=True
                )
            await asyncio.sleep(interval)

    def _finished(self, entry: dict[str, Any], url: str) -> dict[str, str] | None:
        status = entry.get("status") if isinstance(entry.get("status"), dict) else {}
        assert isinstance(status, dict)
        if status.get("status_str") == "error":
            raise self._execution_error(url, status)
        outputs = entry.get("outputs")
        if not isinstance(outputs, dict) or not outputs:
            return None
        wanted = self.settings.get("output_node")
        candidates: list[dict[str, Any]] = []
        for node_id in sorted(outputs, key=str):
            if wanted is not None and str(wanted) != node_id:
                continue
            images = outputs[node_id].get("images") if isinstance(outputs[node_id], dict) else None
            candidates.extend(i for i in images or [] if isinstance(i, dict) and "filename" in i)
        # Saved outputs beat previews (type "temp").
        candidates.sort(key=lambda i: i.get("type") != "output")
        if candidates:
            img = candidates[0]
            return {
                "filename": str(img["filename"]),
                "subfolder": str(img.get("subfolder", "")),
                "type": str(img.get("type", "output")),
            }
        if status.get("completed"):
            raise self.bad_reply(url, "the workflow finished without an image output")
        return None

    def _execution_error(self, url: str, status: dict[str, Any]) -> ProviderError:
        detail = ""
        for msg in status.get("messages") or []:
            if isinstance(msg, list) and len(msg) == 2 and msg[0] == "execution_error":
                info = msg[1] if isinstance(msg[1], dict) else {}
                detail = f"{info.get('node_type', '?')}: {info.get('exception_message', '')}"
        return self.error(f"{url}: workflow failed: {detail or 'execution error'}", transient=False)
