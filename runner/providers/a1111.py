"""AUTOMATIC1111 stable-diffusion-webui started with --api.

POST /sdapi/v1/txt2img {prompt, negative_prompt, seed, steps, cfg_scale, width, height,
sampler_name, batch_size, n_iter} -> {images: [b64 PNG], parameters, info: "<JSON string>"}.
With references: POST /sdapi/v1/img2img with init_images. The seed actually used is read back
from ``info`` (a seed of -1 asks the server to pick one).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from ._http import HttpProvider, b64decode, b64encode
from .base import Capabilities, ImageRequest, ImageResult


class A1111Provider(HttpProvider):
    """A local AUTOMATIC1111 web UI API (default http://127.0.0.1:7860)."""

    key: ClassVar[str] = "a1111"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "AUTOMATIC1111 stable-diffusion-webui --api (txt2img, img2img)"
    default_base_url: ClassVar[str] = "http://127.0.0.1:7860"
    default_capabilities: ClassVar[Capabilities] = Capabilities(
        kinds=frozenset({"image"}),
        supports_seed=True,
        supports_reference_image=True,
        max_concurrency=1,
        accepts_idempotency_key=False,
    )
    known_settings: ClassVar[frozenset[str]] = frozenset(
        {"base_url", "steps", "cfg_scale", "sampler_name", "denoising_strength", "params"}
    )
    defaults: ClassVar[dict[str, Any]] = {
        "steps": 20,
        "cfg_scale": 7.0,
        "sampler_name": "Euler a",
        "denoising_strength": 0.75,
    }

    async def generate_image(self, request: ImageRequest) -> ImageResult:
        extra = self.settings.get("params", {})
        body: dict[str, Any] = {
            "prompt": request.prompt,
            "negative_prompt": request.negative_prompt,
            "seed": request.seed if request.seed is not None else -1,
            "steps": self.settings["steps"],
            "cfg_scale": self.settings["cfg_scale"],
            "sampler_name": self.settings["sampler_name"],
            "width": request.size[0],
            "height": request.size[1],
            "batch_size": 1,
            "n_iter": 1,
            **(extra if isinstance(extra, dict) else {}),
            **request.params,
        }
        if request.references:
            url = "/sdapi/v1/img2img"
            body["init_images"] = [b64encode(r) for r in request.references]
            body.setdefault("denoising_strength", self.settings["denoising_strength"])
        else:
            url = "/sdapi/v1/txt2img"
        async with self.client(request.timeout) as client:
            reply = self.json_of(await self.send(client, "POST", url, json=body))
        images = reply.get("images")
        if not isinstance(images, list) or not images:
            raise self.bad_reply(f"POST {url}", "no images[] in the reply")
        try:
            image = b64decode(images[0], "images[0]")
        except ValueError as exc:
            raise self.bad_reply(f"POST {url}", str(exc)) from None
        info = self._info(reply.get("info"))
        seed = info.get("seed", request.seed)
        meta = {
            "seed": seed if isinstance(seed, int) else request.seed,
            "model": info.get("sd_model_name") or info.get("sd_model_hash"),
            "revised_prompt": None,
            "all_seeds": info.get("all_seeds"),
        }
        return ImageResult(image=image, metadata=meta, usage={"images": 1})

    @staticmethod
    def _info(raw: Any) -> dict[str, Any]:
        # ``info`` is a JSON document inside a string; tolerate servers that send it decoded.
        if isinstance(raw, dict):
            return raw
        if isinstance(raw, str):
            try:
                value = json.loads(raw)
            except ValueError:
                return {}
            return value if isinstance(value, dict) else {}
        return {}
