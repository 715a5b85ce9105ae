"""A loopback AUTOMATIC1111 --api that behaves as modules/api/api.py does.

What carries over from the real service (facts, not code):
- POST /sdapi/v1/txt2img and /sdapi/v1/img2img render under one queue lock: one job at a time,
  the others wait in line. A job runs to the end whether or not its client still waits, and its
  images exist only in the reply ({images: [base64], parameters, info: "<JSON string>"}).
- GET /sdapi/v1/progress answers outside the lock: {progress, eta_relative, state: {skipped,
  interrupted, stopping_generation, job, job_count, job_timestamp, job_no, sampling_step,
  sampling_steps}, current_image, textinfo}; ``job_count`` is 0 when idle.
- Errors go through api_middleware's handle_exception: ``{error: <exception class>, detail,
  body, errors: str(exception)}`` with the exception's status, e.g. an unknown sampler is
  404 ``{"error": "HTTPException", "detail": "Sampler not found", "body": "",
  "errors": "404: Sampler not found"}``; img2img without init_images is 404 "Init image not
  found"; a body that does not fit the request model is FastAPI's 422 ``{detail: [{loc, msg,
  type}]}``.
- ``--api-auth user:pass``: every /sdapi route needs HTTP Basic; no credentials is 401
  "Not authenticated", wrong ones 401 "Incorrect username or password" (the WWW-Authenticate
  header is dropped by handle_exception).

``executions`` counts the renders started (the GPU work); ``max_parallel`` the most at once.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
from typing import Any

from .servers import ProtocolServer, Recorded, Reply, b64, colour_of, png

SAMPLERS = ["Euler a", "Euler", "DPM++ 2M", "DPM++ 2M Karras", "DDIM"]
INT_FIELDS = ("seed", "steps", "width", "height", "batch_size", "n_iter")


def http_exception(status: int, detail: str) -> Reply:
    """handle_exception's body for a FastAPI HTTPException."""
    body = {"error": "HTTPException", "detail": detail, "body": "", "errors": f"{status}: {detail}"}
    return Reply(status, body)


class A1111Server(ProtocolServer):
    """AUTOMATIC1111's API over a real socket; each render takes ``render_s`` seconds."""

    def __init__(self, *, render_s: float = 0.0, api_auth: str | None = None) -> None:
        super().__init__()
        self.render_s = render_s
        self.credentials = dict(a.split(":", 1) for a in api_auth.split(",")) if api_auth else {}
        self.queue_lock = threading.Lock()
        self.state_lock = threading.Lock()
        self.executions = 0
        self.running = 0
        self.max_parallel = 0
        self.state: dict[str, Any] = self._idle()
        self.route("POST", "/sdapi/v1/txt2img", self._make)
        self.route("POST", "/sdapi/v1/img2img", self._make)
        self.route("GET", "/sdapi/v1/progress", self._progress)
        self.route("GET", "/sdapi/v1/samplers", self._samplers)

    @staticmethod
    def _idle() -> dict[str, Any]:
        return {
            "skipped": False,
            "interrupted": False,
            "stopping_generation": False,
            "job": "",
            "job_count": 0,
            "job_timestamp": "0",
            "job_no": 0,
            "sampling_step": 0,
            "sampling_steps": 0,
        }

    def wait_idle(self, timeout: float = 10.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.state_lock:
                if self.running == 0 and not self.queue_lock.locked():
                    return
            time.sleep(0.01)
        raise AssertionError("A1111 is still rendering")

    def _answer(self, rec: Recorded) -> Reply:
        refused = self._auth(rec)
        if refused is not None:
            with self._lock:
                self.requests.append(rec)
            return refused
        return super()._answer(rec)

    def _auth(self, rec: Recorded) -> Reply | None:
        if not self.credentials or not rec.path.startswith("/sdapi/"):
            return None
        scheme, _, encoded = rec.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return http_exception(401, "Not authenticated")
        try:
            user, _, password = base64.b64decode(encoded).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return http_exception(401, "Not authenticated")
        if self.credentials.get(user) != password:
            return http_exception(401, "Incorrect username or password")
        return None

    def _samplers(self, rec: Recorded) -> Reply:
        return Reply(body=[{"name": s, "aliases": [], "options": {}} for s in SAMPLERS])

    def _progress(self, rec: Recorded) -> Reply:
        with self.state_lock:
            state = dict(self.state)
        if state["job_count"] == 0:
            return Reply(
                body={
                    "progress": 0,
                    "eta_relative": 0,
                    "state": state,
                    "current_image": None,
                    "textinfo": None,
                }
            )
        steps = max(state["sampling_steps"], 1)
        return Reply(
            body={
                "progress": min(0.01 + state["sampling_step"] / steps, 1),
                "eta_relative": 0.5,
                "state": state,
                "current_image": None,
                "textinfo": None,
            }
        )

    def _make(self, rec: Recorded) -> Reply:
        try:
            body = rec.json()
        except ValueError:
            return Reply(422, {"detail": [{"loc": ["body"], "msg": "invalid JSON", "type": "x"}]})
        for name in INT_FIELDS:
            if name in body and (isinstance(body[name], bool) or not isinstance(body[name], int)):
                detail = {"loc": ["body", name], "msg": "value is not a valid integer"}
                return Reply(422, {"detail": [{**detail, "type": "type_error.integer"}]})
        img2img = rec.path.endswith("img2img")
        if img2img and body.get("init_images") is None:
            return http_exception(404, "Init image not found")
        sampler = body.get("sampler_name") or body.get("sampler_index") or "Euler"
        if sampler not in SAMPLERS:
            return http_exception(404, "Sampler not found")
        if img2img:
            batch = int(body.get("batch_size", 1))
            if len(body["init_images"]) > batch:  # StableDiffusionProcessingImg2Img.init
                why = f"bad number of images passed: {len(body['init_images'])}; expecting {batch} or less"
                return Reply(
                    500, {"error": "RuntimeError", "detail": "", "body": "", "errors": why}
                )
            for item in body["init_images"]:
                try:
                    base64.b64decode(str(item).split(",")[-1], validate=True)
                except binascii.Error:
                    return Reply(
                        500,
                        {
                            "error": "HTTPException",
                            "detail": "Invalid encoded image",
                            "body": "",
                            "errors": "500: Invalid encoded image",
                        },
                    )
        with self.queue_lock:  # one job at a time, as the web UI's queue lock makes it
            return self._render(body, img2img)

    def _render(self, body: dict[str, Any], img2img: bool) -> Reply:
        steps = int(body.get("steps", 20))
        with self.state_lock:
            self.executions += 1
            self.running += 1
            self.max_parallel = max(self.max_parallel, self.running)
            self.state.update(
                job="scripts_img2img" if img2img else "scripts_txt2img",
                job_count=int(body.get("n_iter", 1)),
                job_timestamp=time.strftime("%Y%m%d%H%M%S"),
                sampling_steps=steps,
            )
        try:
            for step in range(steps):
                time.sleep(self.render_s / max(steps, 1))
                with self.state_lock:
                    self.state["sampling_step"] = step + 1
        finally:
            with self.state_lock:
                self.running -= 1
                self.state = self._idle()
        seed = body.get("seed", -1)
        seed = 4242 if seed == -1 else seed
        image = png(colour_of(f"{body.get('prompt')}/{seed}"), (body["width"], body["height"]))
        info = {
            "prompt": body.get("prompt", ""),
            "all_prompts": [body.get("prompt", "")],
            "seed": seed,
            "all_seeds": [seed],
            "sd_model_name": "sdxl-test",
            "sd_model_hash": "31e35c80fc",
            "sampler_name": body.get("sampler_name"),
        }
        return Reply(body={"images": [b64(image)], "parameters": body, "info": json.dumps(info)})
