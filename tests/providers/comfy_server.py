"""A loopback ComfyUI that behaves as ComfyUI's server.py and execution.py do.

What carries over from the real service (facts, not code):
- POST /prompt {prompt, client_id?, prompt_id?, extra_data?}: the graph is validated before it is
  queued. A node without class_type or with an unknown class is refused with
  ``{"error": {"type": "missing_node_type", ...}, "node_errors": {}}``; a graph without an output
  node with ``prompt_no_outputs``; bad inputs with ``prompt_outputs_failed_validation`` and
  per-node ``node_errors`` ({errors: [{type, message, details, extra_info}], dependent_outputs,
  class_type}); a body without "prompt" with ``no_prompt``. Inputs a node does not declare are
  ignored (a typo in a substitution path is silently dropped by the real server). A client may
  supply its own prompt_id (current ComfyUI does ``str(json_data.get("prompt_id", uuid4()))``).
  Accepted: ``{prompt_id, number, node_errors}``: a prompt with at least one valid output is
  accepted, only its valid outputs run, and ``node_errors`` names the nodes behind the others.
- One worker executes queued prompts in order, whether or not any client still waits; a finished
  prompt lands in the history: ``{prompt, outputs: {node: {images: [{filename, subfolder,
  type}]}}, status: {status_str, completed, messages}, meta}``. A failing node gives status_str
  "error" and an ``execution_error`` message {prompt_id, node_id, node_type, exception_message,
  exception_type, traceback, ...}.
- GET /history/{id} -> ``{}`` for an id it does not have; GET /queue -> {queue_running,
  queue_pending} of ``[number, prompt_id, prompt, extra_data, outputs_to_execute]``;
  GET /view?filename&subfolder&type -> the bytes or 404 (400 for a path that climbs out);
  POST /upload/image (multipart: image, overwrite, type, subfolder) -> {name, subfolder, type}.

- POST /queue {"clear": true} empties the pending queue, {"delete": [prompt_id, ...]} takes
  those prompts out of it; the running prompt is untouched and a deleted one never reaches
  the history (it simply is no more).
- POST /interrupt ({prompt_id}: only if that prompt is the one running; nothing: whatever
  runs) stops the running prompt at its next sampler step: an ``execution_interrupted`` message
  {prompt_id, node_id, node_type, executed} (to its client; to every socket if it has none),
  status_str "error", completed false.
- GET /ws: the websocket of progress messages (see comfy_ws.py); ``websocket=False`` plays a
  server (or a proxy in front of one) without it, ``ws.drop_after_progress`` one whose socket
  drops mid-job. The render time is spread over the sampler's ``steps``.

``executions`` counts what the worker ran, per prompt_id: the "paid" GPU work.
``restart()`` forgets the queue and the history and cuts the sockets, as a restarted ComfyUI.
"""

from __future__ import annotations

import collections
import io
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from PIL import Image

from .comfy_ws import PromptSockets, timestamp
from .servers import ProtocolServer, Recorded, Reply, colour_of

CKPTS = ["sd_v1-5.safetensors", "sdxl_base_1.0.safetensors"]
UNETS = ["flux1-dev.safetensors", "flux1-schnell.safetensors"]
CLIPS = ["t5xxl_fp16.safetensors", "clip_l.safetensors"]
VAES = ["ae.safetensors"]
SAMPLERS = ["euler", "euler_ancestral", "dpmpp_2m", "dpmpp_2m_sde"]
SCHEDULERS = ["normal", "karras", "simple", "sgm_uniform"]
SAMPLING = {"KSampler", "SamplerCustomAdvanced"}  # the nodes that report progress per step


@dataclass(frozen=True)
class NodeDef:
    """One node class: its required inputs (name -> type or list of allowed values)."""

    required: dict[str, Any]
    returns: tuple[str, ...] = ()
    output_node: bool = False
    optional: dict[str, Any] = field(default_factory=dict)


NODES: dict[str, NodeDef] = {
    "CheckpointLoaderSimple": NodeDef({"ckpt_name": CKPTS}, ("MODEL", "CLIP", "VAE")),
    "CLIPTextEncode": NodeDef({"text": "STRING", "clip": "CLIP"}, ("CONDITIONING",)),
    "CLIPTextEncodeSDXL": NodeDef(
        {
            "clip": "CLIP",
            "width": "INT",
            "height": "INT",
            "crop_w": "INT",
            "crop_h": "INT",
            "target_width": "INT",
            "target_height": "INT",
            "text_g": "STRING",
            "text_l": "STRING",
        },
        ("CONDITIONING",),
    ),
    "EmptyLatentImage": NodeDef(
        {"width": "INT", "height": "INT", "batch_size": "INT"}, ("LATENT",)
    ),
    "EmptySD3LatentImage": NodeDef(
        {"width": "INT", "height": "INT", "batch_size": "INT"}, ("LATENT",)
    ),
    "KSampler": NodeDef(
        {
            "model": "MODEL",
            "seed": "INT",
            "steps": "INT",
            "cfg": "FLOAT",
            "sampler_name": SAMPLERS,
            "scheduler": SCHEDULERS,
            "positive": "CONDITIONING",
            "negative": "CONDITIONING",
            "latent_image": "LATENT",
            "denoise": "FLOAT",
        },
        ("LATENT",),
    ),
    "VAEDecode": NodeDef({"samples": "LATENT", "vae": "VAE"}, ("IMAGE",)),
    "VAEEncode": NodeDef({"pixels": "IMAGE", "vae": "VAE"}, ("LATENT",)),
    "SaveImage": NodeDef({"images": "IMAGE", "filename_prefix": "STRING"}, (), True),
    "PreviewImage": NodeDef({"images": "IMAGE"}, (), True),
    "LoadImage": NodeDef({"image": "UPLOADED"}, ("IMAGE", "MASK")),
    "UNETLoader": NodeDef(
        {"unet_name": UNETS, "weight_dtype": ["default", "fp8_e4m3fn"]}, ("MODEL",)
    ),
    "DualCLIPLoader": NodeDef(
        {"clip_name1": CLIPS, "clip_name2": CLIPS, "type": ["sdxl", "sd3", "flux"]}, ("CLIP",)
    ),
    "VAELoader": NodeDef({"vae_name": VAES}, ("VAE",)),
    "FluxGuidance": NodeDef(
        {"conditioning": "CONDITIONING", "guidance": "FLOAT"}, ("CONDITIONING",)
    ),
    "RandomNoise": NodeDef({"noise_seed": "INT"}, ("NOISE",)),
    "KSamplerSelect": NodeDef({"sampler_name": SAMPLERS}, ("SAMPLER",)),
    "BasicScheduler": NodeDef(
        {"model": "MODEL", "scheduler": SCHEDULERS, "steps": "INT", "denoise": "FLOAT"},
        ("SIGMAS",),
    ),
    "BasicGuider": NodeDef({"model": "MODEL", "conditioning": "CONDITIONING"}, ("GUIDER",)),
    "SamplerCustomAdvanced": NodeDef(
        {
            "noise": "NOISE",
            "guider": "GUIDER",
            "sampler": "SAMPLER",
            "sigmas": "SIGMAS",
            "latent_image": "LATENT",
        },
        ("LATENT", "LATENT"),
    ),
}


def _issue(kind: str, message: str, details: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "message": message, "details": details, "extra_info": extra}


class ComfyUIServer(ProtocolServer):
    """ComfyUI's HTTP API over a real socket, with a worker that renders in ``render_s``."""

    def __init__(
        self, *, render_s: float = 0.0, honour_prompt_id: bool = True, websocket: bool = True
    ) -> None:
        super().__init__()
        self.render_s = render_s
        self.honour_prompt_id = honour_prompt_id  # False: an older ComfyUI that picks its own
        self.number = 0
        self.pending: collections.deque[list[Any]] = collections.deque()
        self.running: list[Any] | None = None
        self.history: dict[str, dict[str, Any]] = {}
        self.inputs: dict[str, bytes] = {}  # the input folder: "subfolder/name" -> bytes
        self.files: dict[tuple[str, str, str], bytes] = {}  # (type, subfolder, filename)
        self.executions: collections.Counter[str] = collections.Counter()
        self.graphs: dict[str, dict[str, Any]] = {}  # what was queued, by prompt_id
        self._counter = 0
        self._wake = threading.Condition()
        self._stop = False
        self._worker = threading.Thread(target=self._work, daemon=True)
        self.route("POST", "/prompt", self._prompt)
        self.route("GET", "/prompt", self._queue_info)
        self.route("GET", "/queue", self._queue)
        self.route("GET", "/history", self._all_history)
        self.route("GET", "/history/[^/]+", self._history)
        self.route("GET", "/view", self._view)
        self.route("POST", "/upload/image", self._upload)
        self.route("POST", "/interrupt", self._interrupt)
        self.route("POST", "/queue", self._edit_queue)
        self._interrupted = False
        self.ws = PromptSockets(self._remaining)
        if websocket:
            self.websocket("/ws", self.ws.serve)

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> ComfyUIServer:
        super().__enter__()
        self._worker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._wake:
            self._stop = True
            self._wake.notify_all()
        self._worker.join(timeout=5)
        self.ws.drop_all()
        super().__exit__(*exc)

    def restart(self) -> None:
        """Forget the queue and the history (a restarted server); the running job is lost."""
        with self._wake:
            self.pending.clear()
            self.history.clear()
            self.running = None
        self.ws.drop_all()

    def total_executions(self) -> int:
        with self._wake:
            return sum(self.executions.values())

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Block until nothing is queued or running (for assertions after a client gave up)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self._wake:
                if not self.pending and self.running is None:
                    return
            time.sleep(0.01)
        raise AssertionError("the ComfyUI queue did not drain")

    # --- validation (execution.validate_prompt) ------------------------------------------------

    def validate(
        self, prompt: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, dict[str, Any], list[str]]:
        """(error, node_errors, the outputs that will run), as execution.validate_prompt."""
        outputs = []
        for nid, node in prompt.items():
            title = node.get("_meta", {}).get("title") if isinstance(node, dict) else None
            if not isinstance(node, dict) or "class_type" not in node:
                message = (
                    f"Node '{title or f'ID #{nid}'}' has no class_type. The workflow may be "
                    "corrupted or a custom node is missing."
                )
                error = _issue(
                    "missing_node_type",
                    message,
                    f"Node ID '#{nid}'",
                    node_id=nid,
                    class_type=None,
                    node_title=title,
                )
                return error, {}, []
            cls = node["class_type"]
            if cls not in NODES:
                name = title or cls
                error = _issue(
                    "missing_node_type",
                    f"Node '{name}' not found. The custom node may not be installed.",
                    f"Node ID '#{nid}'",
                    node_id=nid,
                    class_type=cls,
                    node_title=name,
                )
                return error, {}, []
            if NODES[cls].output_node:
                outputs.append(nid)
        if not outputs:
            return _issue("prompt_no_outputs", "Prompt has no outputs", ""), {}, []
        node_errors: dict[str, Any] = {}
        lines: list[str] = []
        good: list[str] = []
        for out in outputs:
            failed = False
            for nid in self._upstream(prompt, out):
                reasons = self._check_inputs(prompt, nid)
                if reasons:
                    failed = True
                    entry = node_errors.setdefault(
                        nid,
                        {
                            "errors": reasons,
                            "dependent_outputs": [],
                            "class_type": prompt[nid]["class_type"],
                        },
                    )
                    entry["dependent_outputs"].append(out)
                    lines.extend(f"{r['message']}: {r['details']}" for r in reasons)
            if not failed:
                good.append(out)
        if not good:
            error = _issue(
                "prompt_outputs_failed_validation",
                "Prompt outputs failed validation",
                "\n".join(dict.fromkeys(lines)),
            )
            return error, node_errors, []
        # At least one output is good: the prompt is accepted, only its good outputs run, and
        # the reply's node_errors name what will not.
        return None, node_errors, good

    @staticmethod
    def _upstream(prompt: dict[str, Any], start: str) -> list[str]:
        seen: list[str] = []
        todo = [start]
        while todo:
            nid = todo.pop()
            if nid in seen or nid not in prompt:
                continue
            seen.append(nid)
            for value in prompt[nid].get("inputs", {}).values():
                if isinstance(value, list) and len(value) == 2:
                    todo.append(str(value[0]))
        return seen

    def _check_inputs(self, prompt: dict[str, Any], nid: str) -> list[dict[str, Any]]:
        node = prompt[nid]
        inputs = node.get("inputs", {})
        reasons = []
        for name, kind in NODES[node["class_type"]].required.items():
            if name not in inputs:
                reasons.append(
                    _issue(
                        "required_input_missing",
                        "Required input is missing",
                        name,
                        input_name=name,
                    )
                )
                continue
            value = inputs[name]
            if isinstance(value, list):
                src = prompt.get(str(value[0])) if len(value) == 2 else None
                if src is None or src.get("class_type") not in NODES:
                    reasons.append(
                        _issue(
                            "bad_linked_input",
                            "Bad linked input, must be a length-2 list of [node_id, slot_index]",
                            name,
                            input_name=name,
                            received_value=value,
                        )
                    )
                continue
            if isinstance(kind, list) and value not in kind:
                reasons.append(
                    _issue(
                        "value_not_in_list",
                        "Value not in list",
                        f"{name}: '{value}' not in {kind}",
                        input_name=name,
                        received_value=value,
                    )
                )
            elif kind == "UPLOADED" and value not in self.inputs:
                reasons.append(
                    _issue(
                        "custom_validation_failed",
                        "Custom validation failed for node",
                        f"{name} - Invalid image file: {value}",
                        input_name=name,
                        received_value=value,
                    )
                )
            elif kind == "INT" and (isinstance(value, bool) or not isinstance(value, int)):
                reasons.append(
                    _issue(
                        "invalid_input_type",
                        "Failed to convert an input value to a INT value",
                        f"{name}, {value}, invalid literal for int()",
                        input_name=name,
                        received_value=value,
                    )
                )
        return reasons

    # --- routes -------------------------------------------------------------------------------

    def _prompt(self, rec: Recorded) -> Reply:
        data = rec.json()
        if "prompt" not in data:
            error = _issue("no_prompt", "No prompt provided", "No prompt provided")
            return Reply(400, {"error": error, "node_errors": {}})
        prompt = data["prompt"]
        pid = str(data.get("prompt_id", uuid.uuid4())) if self.honour_prompt_id else None
        pid = pid or str(uuid.uuid4())
        error, node_errors, outputs = self.validate(prompt)
        if error is not None:
            return Reply(400, {"error": error, "node_errors": node_errors})
        extra = dict(data.get("extra_data") or {})
        if "client_id" in data:
            extra["client_id"] = data["client_id"]
        with self._wake:
            number = self.number
            self.number += 1
            self.pending.append([number, pid, prompt, extra, outputs])
            self.graphs[pid] = prompt
            self._wake.notify_all()
        self.ws.queue_updated()
        return Reply(body={"prompt_id": pid, "number": number, "node_errors": node_errors})

    def _interrupt(self, rec: Recorded) -> Reply:
        # server.py: with a prompt_id, only that prompt is interrupted, if it is the one running.
        wanted = rec.json().get("prompt_id") if rec.body else None
        with self._wake:
            if self.running is not None and wanted in (None, self.running[1]):
                self._interrupted = True
        return Reply(body=b"", content_type="text/plain")

    def _edit_queue(self, rec: Recorded) -> Reply:
        # server.py: {"clear": true} empties the pending queue, {"delete": [ids]} takes those
        # prompts out of it. The running prompt stays; a deleted one never reaches the history.
        data = rec.json()
        with self._wake:
            if data.get("clear"):
                self.pending.clear()
            for pid in data.get("delete") or []:
                for item in list(self.pending):
                    if item[1] == pid:
                        self.pending.remove(item)
                        break
        self.ws.queue_updated()
        return Reply(body=b"", content_type="text/plain")

    def _remaining(self) -> int:
        with self._wake:
            return len(self.pending) + (self.running is not None)

    def _queue_info(self, rec: Recorded) -> Reply:
        return Reply(body={"exec_info": {"queue_remaining": self._remaining()}})

    def _queue(self, rec: Recorded) -> Reply:
        with self._wake:
            running = [self.running] if self.running is not None else []
            return Reply(body={"queue_running": running, "queue_pending": list(self.pending)})

    def _all_history(self, rec: Recorded) -> Reply:
        with self._wake:
            return Reply(body=dict(self.history))

    def _history(self, rec: Recorded) -> Reply:
        pid = rec.path.rsplit("/", 1)[1]
        with self._wake:
            entry = self.history.get(pid)
            return Reply(body={pid: entry} if entry is not None else {})

    def _view(self, rec: Recorded) -> Reply:
        q = {k: v[0] for k, v in rec.query.items()}
        name = q.get("filename", "")
        if not name:
            return Reply(404, b"", content_type="text/plain")
        if name.startswith("/") or ".." in name:
            return Reply(400, b"", content_type="text/plain")
        key = (q.get("type", "output"), q.get("subfolder", ""), name)
        with self._wake:
            data = self.files.get(key)
        if data is None:
            return Reply(404, b"", content_type="text/plain")
        return Reply(
            body=data,
            content_type="image/png",
            headers={"Content-Disposition": f'filename="{name}"'},
        )

    def _upload(self, rec: Recorded) -> Reply:
        fields: dict[str, str] = {}
        image: tuple[str, bytes] | None = None
        for name, filename, data in rec.parts():
            if name == "image" and filename:
                image = (filename, data)
            elif filename is None:
                fields[name] = data.decode()
        if image is None:
            return Reply(400, b"", content_type="text/plain")
        filename, data = image
        sub = fields.get("subfolder", "")
        kind = fields.get("type") or "input"
        overwrite = fields.get("overwrite") in ("true", "1")
        stem, dot, ext = filename.rpartition(".")
        i = 1
        with self._wake:
            while not overwrite and self.inputs.get(self._input_key(sub, filename), data) != data:
                filename = f"{stem} ({i}).{ext}" if dot else f"{filename} ({i})"
                i += 1
            self.inputs[self._input_key(sub, filename)] = data
        return Reply(body={"name": filename, "subfolder": sub, "type": kind})

    @staticmethod
    def _input_key(sub: str, name: str) -> str:
        # LoadImage's value names a file under the input folder: "name" or "sub/name".
        return f"{sub}/{name}" if sub else name

    # --- the worker (execution.PromptExecutor) ---------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._wake:
                while not self.pending and not self._stop:
                    self._wake.wait(0.05)
                if self._stop:
                    return
                item = self.pending.popleft()
                self.running = item
                self._interrupted = False
            self.ws.queue_updated()
            entry = self._execute(item)
            with self._wake:
                forgotten = self.running is not item  # by a restart meanwhile
                if not forgotten:
                    self.history[item[1]] = entry
                    self.running = None
            if not forgotten:
                self.ws.finished(item[1])

    @staticmethod
    def _order(prompt: dict[str, Any], outputs: list[str]) -> list[str]:
        """The nodes to run, each after the nodes it reads from."""
        order: list[str] = []

        def visit(nid: str) -> None:
            if nid in order or nid not in prompt:
                return
            for value in prompt[nid].get("inputs", {}).values():
                if isinstance(value, list) and len(value) == 2:
                    visit(str(value[0]))
            order.append(nid)

        for out in sorted(outputs):
            visit(out)
        return order

    def _execute(self, item: list[Any]) -> dict[str, Any]:
        _number, pid, prompt, extra, outputs = item
        with self._wake:
            self.executions[pid] += 1
        ws = self.ws
        ws.begin(extra.get("client_id"))
        messages: list[list[Any]] = []

        def add(event: str, data: dict[str, Any], broadcast: bool = False) -> None:
            # execution.add_message: kept in the history, sent to the prompt's client (or to
            # everyone, when broadcast and the prompt has no client).
            data = {**data, "timestamp": timestamp()}
            messages.append([event, data])
            if ws.client_id is not None or broadcast:
                ws.send(event, data, ws.client_id)

        def failed() -> dict[str, Any]:
            status = {"status_str": "error", "completed": False, "messages": messages}
            return {"prompt": item, "outputs": {}, "status": status, "meta": {}}

        add("execution_start", {"prompt_id": pid})
        add("execution_cached", {"nodes": [], "prompt_id": pid})
        text = json.dumps(prompt, sort_keys=True)
        order = self._order(prompt, outputs)
        sampler = next((n for n in order if prompt[n]["class_type"] in SAMPLING), None)
        steps = next(
            (
                v
                for node in prompt.values()
                if isinstance(v := node.get("inputs", {}).get("steps"), int)
                and not isinstance(v, bool)
            ),
            1,
        )
        steps = max(1, steps)
        if sampler is None:
            time.sleep(self.render_s)
        results: dict[str, Any] = {}
        executed: list[str] = []
        for nid in order:
            ws.executing(nid, pid)
            if nid == sampler:
                for step in range(1, steps + 1):
                    time.sleep(self.render_s / steps)
                    if self._interrupted:  # the progress hook raises InterruptProcessingException
                        info = {"prompt_id": pid, "node_id": nid, "executed": executed}
                        info["node_type"] = prompt[nid]["class_type"]
                        add("execution_interrupted", info, broadcast=True)
                        return failed()
                    ws.progress(step, steps, nid, pid)
            if "[[OOM]]" in text and "Sampler" in prompt[nid]["class_type"]:
                add(
                    "execution_error",
                    {
                        "prompt_id": pid,
                        "node_id": nid,
                        "node_type": prompt[nid]["class_type"],
                        "executed": [],
                        "exception_message": "Allocation on device ",
                        "exception_type": "torch.OutOfMemoryError",
                        "traceback": ["..."],
                        "current_inputs": {},
                        "current_outputs": {},
                    },
                )
                return failed()
            if nid in outputs:
                results[nid] = self._save(prompt[nid], text)
                ws.executed(nid, results[nid], pid)
            executed.append(nid)
        add("execution_success", {"prompt_id": pid})
        return {
            "prompt": item,
            "outputs": results,
            "status": {"status_str": "success", "completed": True, "messages": messages},
            "meta": {n: {"node_id": n, "display_node": n} for n in results},
        }

    @staticmethod
    def _pixels(text: str) -> tuple[int, int]:
        """The picture's size as ComfyUI makes it: an empty latent's width and height (the
        latent is 1/8 of them, so the decoded image is each rounded down to a multiple of 8);
        32x32 when the graph starts from no empty latent (an img2img's loaded image)."""
        for node in json.loads(text).values():
            inputs = node.get("inputs") or {}
            w, h = inputs.get("width"), inputs.get("height")
            if "Latent" in str(node.get("class_type")) and isinstance(w, int) and isinstance(h, int):
                return max(8, w // 8 * 8), max(8, h // 8 * 8)
        return 32, 32

    def _save(self, node: dict[str, Any], text: str) -> dict[str, Any]:
        """SaveImage (output) or PreviewImage (temp): one PNG whose colour follows the graph."""
        save = node["class_type"] == "SaveImage"
        with self._wake:
            self._counter += 1
            counter = self._counter
        prefix = str(node["inputs"].get("filename_prefix", "ComfyUI")) if save else "preview"
        filename = f"{prefix}_{counter:05}_.png"
        kind = "output" if save else "temp"
        out = io.BytesIO()
        Image.new("RGB", self._pixels(text), colour_of(text)).save(out, format="PNG")
        with self._wake:
            self.files[(kind, "", filename)] = out.getvalue()
        return {"images": [{"filename": filename, "subfolder": "", "type": kind}]}
