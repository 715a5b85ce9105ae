"""AUTOMATIC1111 stable-diffusion-webui started with --api.

POST /sdapi/v1/txt2img {prompt, negative_prompt, seed, steps, cfg_scale, width, height,
sampler_name, batch_size, n_iter} -> {images: [b64 PNG], parameters, info: "<JSON string>"}.
With a reference: POST /sdapi/v1/img2img with init_images. A1111 starts each image of a batch
from one init image (several need batch_size to match and give one image each; more than
batch_size is its "bad number of images passed"), so a step gives at most one reference: more
is refused at compile time. The seed used is read back from ``info`` (-1 lets the server pick).

A1111 renders one job at a time (its queue lock) and returns the images only in the reply, so
nothing can be fetched later. The client therefore waits for the reply as long as
GET /sdapi/v1/progress shows the server at work (our job or the ones queued before it);
``timeout`` bounds only how long it waits while the server shows no work at all. A reply lost
after the request went out (a reset, a proxy's 502/504, giving up on a silent server) is *maybe
executed* (see _http): the server may have rendered it, so it is not sent again by default.

``--api-auth user:pass``: ``username_env`` and ``password_env`` name the environment variables
holding the HTTP Basic credentials.
"""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any, ClassVar

from ..errors import Location, ProviderError
from ..state.canonical import loads_strict
from ._http import HttpProvider, asked_url, b64decode, b64encode
from ._httpx import httpx
from .base import Capabilities, ImageRequest, ImageResult, ProviderConfigError
from .honours import IMAGE_FIELDS, Honours

# The fields of A1111's txt2img and img2img request models (modules/api/models.py: the
# processing classes' __init__ parameters, less API_NOT_ALLOWED, plus the API's own), less what
# runner sets itself (prompt, negative_prompt, seed, width, height, init_images).
_PAYLOAD_FIELDS = frozenset(
    {
        "styles",
        "subseed",
        "subseed_strength",
        "seed_resize_from_h",
        "seed_resize_from_w",
        "sampler_name",
        "scheduler",
        "batch_size",
        "n_iter",
        "steps",
        "cfg_scale",
        "restore_faces",
        "tiling",
        "do_not_save_samples",
        "do_not_save_grid",
        "eta",
        "denoising_strength",
        "s_min_uncond",
        "s_churn",
        "s_tmax",
        "s_tmin",
        "s_noise",
        "override_settings",
        "override_settings_restore_afterwards",
        "refiner_checkpoint",
        "refiner_switch_at",
        "disable_extra_networks",
        "comments",
        "enable_hr",
        "firstphase_width",
        "firstphase_height",
        "hr_scale",
        "hr_upscaler",
        "hr_second_pass_steps",
        "hr_resize_x",
        "hr_resize_y",
        "hr_checkpoint_name",
        "hr_sampler_name",
        "hr_scheduler",
        "hr_prompt",
        "hr_negative_prompt",
        "resize_mode",
        "image_cfg_scale",
        "mask",
        "mask_blur_x",
        "mask_blur_y",
        "mask_blur",
        "mask_round",
        "inpainting_fill",
        "inpaint_full_res",
        "inpaint_full_res_padding",
        "inpainting_mask_invert",
        "initial_noise_multiplier",
        "latent_mask",
        "script_name",
        "script_args",
        "send_images",
        "save_images",
        "alwayson_scripts",
        "force_task_id",
        "infotext",
        "sampler_index",
    }
)


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
        {
            "base_url",
            "steps",
            "cfg_scale",
            "sampler_name",
            "denoising_strength",
            "params",
            "poll_interval",
            "username_env",
            "password_env",
        }
    )
    defaults: ClassVar[dict[str, Any]] = {
        "steps": 20,
        "cfg_scale": 7.0,
        "sampler_name": "Euler a",
        "denoising_strength": 0.75,
        "poll_interval": 1.0,
    }

    def profile_settings(self) -> dict[str, Any]:
        # How often progress is polled changes nothing in the image.
        return {k: v for k, v in super().profile_settings().items() if k != "poll_interval"}

    def headers(self) -> dict[str, str]:
        headers = super().headers()
        user, password = self.secrets.get("username"), self.secrets.get("password")
        if user is not None or password is not None:
            token = base64.b64encode(f"{user or ''}:{password or ''}".encode()).decode("ascii")
            headers["Authorization"] = f"Basic {token}"
        return headers

    def honours(self, kind: str) -> Honours:
        one = "runner takes one image per call (its own key and ledger row): ask the step for n:"
        return Honours(
            fields=IMAGE_FIELDS,
            # A1111's API models are made from its processing classes' fields, and pydantic
            # drops any other field without a word: a misspelt one would be paid for.
            params=_PAYLOAD_FIELDS,
            refused_params={"batch_size": one, "n_iter": one},
            params_why="A1111 ignores fields its txt2img/img2img models do not have",
        )

    def check(self, *, references: int | None, where: Location | None = None) -> None:
        if references is not None and references > 1:
            raise ProviderConfigError(
                f"provider '{self.name}': the step gives {references} reference images; A1111's "
                "img2img starts each image from one init image (several make a batch of one "
                "image per reference, not a blend), so it takes one",
                where=where,
                hint="give one reference per image step (or one step per reference)",
            )

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
        if len(request.references) > 1:
            self.check(references=len(request.references))
        if request.references:
            url = "/sdapi/v1/img2img"
            body["init_images"] = [b64encode(r) for r in request.references]
            body.setdefault("denoising_strength", self.settings["denoising_strength"])
        else:
            url = "/sdapi/v1/txt2img"
        timeout = request.timeout if request.timeout is not None else self.timeout
        async with self.client(timeout) as client:
            reply = self.json_of(await self._render(client, url, body, request, timeout))
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

    async def _render(
        self,
        client: httpx.AsyncClient,
        url: str,
        body: dict[str, Any],
        request: ImageRequest,
        timeout: float,
    ) -> httpx.Response:
        """POST the job and wait for its reply while the server shows work in progress.

        Raises a MAYBE_EXECUTED ProviderError when the reply is lost after the body went out
        (send's classification) or when the server shows no work for ``timeout`` seconds.
        """
        what = f"POST {url}"
        # No read timeout on the job itself: progress polling decides when to stop waiting.
        post = asyncio.ensure_future(
            self.send(
                client,
                "POST",
                url,
                json=body,
                timeout=httpx.Timeout(None, connect=min(timeout, 10.0)),
                tracker=request.tracker,
            )
        )
        try:
            await self._watch(client, post, timeout, what)
            return await post
        finally:
            if not post.done():
                post.cancel()
            elif not post.cancelled():
                post.exception()  # retrieved, so asyncio does not log it as unhandled

    async def _watch(
        self,
        client: httpx.AsyncClient,
        post: asyncio.Future[httpx.Response],
        timeout: float,
        what: str,
    ) -> None:
        """Return once ``post`` is done; raise maybe-executed after ``timeout`` s without work."""
        interval = min(self.float_setting("poll_interval", 1.0), max(timeout / 2, 0.01))
        last_busy = time.monotonic()
        while True:
            done, _ = await asyncio.wait({post}, timeout=interval)
            if done:
                return
            if await self._busy(client):
                last_busy = time.monotonic()
            elif time.monotonic() - last_busy > timeout:
                raise self.error(
                    f"{what}: no reply within {timeout} s (read timeout); the request was sent "
                    "and /sdapi/v1/progress showed no work meanwhile; the server may have "
                    "rendered the image and A1111 keeps no copy to fetch",
                    maybe_executed=True,
                )

    async def _busy(self, client: httpx.AsyncClient) -> bool:
        """Whether /sdapi/v1/progress shows a job (ours, or one queued before it)."""
        try:
            # httpx's read timeout bounds each wait for a byte: a progress reply trickled a byte
            # at a time would hold the watch (and the apply) for as long as it trickles.
            async with asyncio.timeout(self._timeout_of(client)):
                resp = await client.get("/sdapi/v1/progress", params={"skip_current_image": "true"})
            state = loads_strict(resp.content).get("state") if resp.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError, TimeoutError):
            return False
        return isinstance(state, dict) and bool(state.get("job_count"))

    def status_error(self, what: str, resp: httpx.Response) -> ProviderError:
        error = super().status_error(what, resp)
        cause = _a1111_cause(resp)
        if cause is None:
            return error
        return self.error(
            f"{asked_url(resp.request)} -> HTTP {resp.status_code}: {cause}",
            transient=error.transient,
            maybe_executed=error.maybe_executed,
            status=error.status,
            retry_after=error.retry_after,
        )

    @staticmethod
    def _info(raw: Any) -> dict[str, Any]:
        # ``info`` is a JSON document inside a string; tolerate servers that send it decoded.
        if isinstance(raw, dict):
            return raw
        if isinstance(raw, str):
            try:
                value = loads_strict(raw)
            except ValueError:
                return {}
            return value if isinstance(value, dict) else {}
        return {}


def _a1111_cause(resp: httpx.Response) -> str | None:
    """The cause in A1111's error shape {error, detail, body, errors}: detail, else errors."""
    try:
        body = loads_strict(resp.content)
    except ValueError:
        return None
    if not isinstance(body, dict) or not {"error", "detail", "errors"} <= set(body):
        return None
    detail = body.get("detail")
    cause = detail if isinstance(detail, str) and detail else str(body.get("errors") or "")
    kind = body.get("error")
    if kind and kind != "HTTPException":  # an exception inside the render: name it
        cause = f"{kind}: {cause}"
    return cause or None
