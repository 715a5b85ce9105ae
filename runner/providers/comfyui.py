"""ComfyUI: a remote job per image, journaled before waiting, re-attached after any interruption.

Settings: ``workflow`` (an API-format JSON file, relative to runner.toml), ``substitutions``
mapping request fields to ``"node.inputs.name"`` paths (or lists of them; see comfyui_workflow),
``poll_interval`` seconds, ``output_node``, ``client_id`` (a prefix: each call adds its own
suffix), ``websocket`` (default true). ``timeout`` bounds how long one call waits for its job;
it never causes a second submission.

Protocol (ComfyUI's server.py): POST /upload/image for references; POST /prompt {prompt,
client_id, prompt_id} -> {prompt_id, number, node_errors}; GET /history/{prompt_id} until the
entry appears; GET /queue to tell a queued or running job from one the backend no longer knows;
GET /view?filename=&subfolder=&type= for the bytes.

Never paid twice: the prompt_id is derived from the call's idempotency key and journaled (with
the backend's base URL) *before* POST /prompt, since current ComfyUI honours a client-supplied
prompt_id. A later attempt, a resumed run or the next apply first asks that backend about the
job: finished -> its image is fetched; queued or running -> waited for; unknown to the backend
(not queued, not running, not in the history, e.g. after a restart) -> submitted again. An older
ComfyUI that picks its own id has it journaled as soon as the reply arrives.

Progress: while a job runs, the /ws websocket (comfyui_ws) says how far the sampler is and
wakes the wait the moment the job ends; its end is still confirmed by GET /history. Without a
socket (the backend offers none, it drops, ``websocket = false``) the job is polled.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
import uuid
from pathlib import Path
from typing import Any, ClassVar

from ..errors import Location, ProviderError
from ..state.canonical import loads_strict
from ._http import HttpProvider, asked_url, backend_message, backend_of
from ._httpx import httpx
from .base import Capabilities, ImageRequest, ImageResult, ProviderConfigError
from .comfyui_workflow import Workflow, check_workflow, read_graph
from .comfyui_ws import ProgressSocket
from .honours import Honours
from .jobs import RemoteJob
from .pool import tell

_AHEAD = re.compile(r"queued \((\d+) ahead\)")

MAX_RESUBMITS = 2  # per call: a backend that keeps forgetting jobs is not fed forever
# While the websocket is up, /history is still asked this often (a missed message costs this).
SOCKET_POLL = 5.0


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
        {
            "base_url",
            "workflow",
            "substitutions",
            "poll_interval",
            "output_node",
            "client_id",
            "websocket",
        }
    )
    defaults: ClassVar[dict[str, Any]] = {
        "poll_interval": 0.5,
        "client_id": "runner",
        "websocket": True,
    }
    remote_jobs: ClassVar[bool] = True

    _checked: tuple[bytes, Workflow] | None = None

    @property
    def capabilities(self) -> Capabilities:
        caps = super().capabilities
        subs = self.settings.get("substitutions")
        return Capabilities(
            kinds=caps.kinds,
            supports_seed=isinstance(subs, dict) and "seed" in subs,
            supports_reference_image=isinstance(subs, dict) and "reference" in subs,
            max_concurrency=caps.max_concurrency,
            accepts_idempotency_key=False,
        )

    def honours(self, kind: str) -> Honours:
        subs = self.settings.get("substitutions")
        subs = subs if isinstance(subs, dict) else {}
        carried = {
            "negative_prompt": "negative_prompt" in subs,
            "size": "width" in subs and "height" in subs,
            "seed": "seed" in subs,
            "references": "reference" in subs,
        }
        where = f"[providers.{self.name}.substitutions] in runner.toml"
        names = {"size": "width and height", "references": "reference"}
        return Honours(
            fields=frozenset(f for f, ok in carried.items() if ok),
            missing={
                f: f"the workflow has no substitution for it: map {names.get(f, f)} to the "
                f"workflow's input under {where}, or drop the setting"
                for f, ok in carried.items()
                if not ok
            },
            params=frozenset(),
            params_why="ComfyUI is sent the workflow with its substitutions only: set the value "
            "in the workflow file",
            # The same graph queued again is the same picture (ComfyUI caches node outputs).
            seedless_varies=carried["seed"],
        )

    # --- the workflow -------------------------------------------------------------------------

    def _workflow_path(self) -> Path:
        name = self.settings.get("workflow")
        if not isinstance(name, str) or not name:
            raise ProviderConfigError(
                f"provider '{self.name}': setting 'workflow' (an API-format JSON file) is required"
            )
        return (self.base_dir / name).resolve()

    def workflow(self, where: Location | None = None) -> Workflow:
        """The checked workflow (re-read when the file changes). Raises ProviderConfigError."""
        path = self._workflow_path()
        try:
            raw = path.read_bytes()
        except OSError:
            raw = b""
        if self._checked is not None and self._checked[0] == raw and raw:
            return self._checked[1]
        graph = read_graph(path, self.name)
        subs, output_node = self.settings.get("substitutions", {}), self.settings.get("output_node")
        checked = check_workflow(graph, subs, self.name, where, output_node)
        self._checked = (raw, checked)
        return checked

    def check(self, *, references: int | None, where: Location | None = None) -> None:
        flow = self.workflow(where)
        slots = flow.reference_slots
        if references is not None and slots and references > slots:
            raise ProviderConfigError(
                f"provider '{self.name}': the step gives {references} reference images but the "
                f"workflow's substitutions map {slots} LoadImage node(s) to 'reference'",
                where=where,
                hint="list one LoadImage path per reference image under substitutions.reference",
            )

    def profile_settings(self) -> dict[str, Any]:
        # The workflow's content, not its path, decides the output.
        out = {
            k: v
            for k, v in super().profile_settings().items()
            if k not in ("poll_interval", "client_id", "workflow", "websocket")
        }
        try:
            out["workflow_sha256"] = hashlib.sha256(self._workflow_path().read_bytes()).hexdigest()
        except (OSError, ProviderConfigError):
            out["workflow_sha256"] = None
        return out

    # --- the call -------------------------------------------------------------------------------

    async def generate_image(self, request: ImageRequest) -> ImageResult:
        flow = self.workflow()
        if request.job is None:  # called directly: the job lives as long as the request
            request.job = RemoteJob(request.idempotency_key)
        job = request.job
        timeout = request.timeout if request.timeout is not None else self.timeout
        deadline = time.monotonic() + timeout
        values = self._values(request)
        reattached = False
        known = job.known or {}
        # A job re-attaches at the backend that has it, whatever the pool's load or health.
        pin = (
            known.get("backend")
            if known.get("prompt_id") and known.get("state") not in ("failed", "unsent")
            else None
        )
        async with self.client(timeout, backend=pin) as client:
            state = await self._reattach(client, job)
            reattached = state is not None
            # A job journaled before client ids were per call has no id to listen under.
            client_id = known.get("client_id") if reattached else self._client_id(job.key)
            socket = await self._socket(client, client_id, timeout)
            try:
                resubmits = 0
                while True:
                    fresh = state is None  # submitted by this call just now
                    if state is None:
                        if resubmits > MAX_RESUBMITS:
                            raise self.error(
                                f"{self.base_url} forgot the prompt {resubmits} times while it "
                                "ran; not submitting it again",
                                transient=False,
                            )
                        client_id = client_id or self._client_id(job.key)
                        if reattached:  # the server forgot the journaled prompt (a restart)
                            job.say(
                                f"{backend_of(client)} no longer knows prompt "
                                f"{known.get('prompt_id')}; submitting it again"
                            )
                        await self._submit(client, flow, values, request, job, client_id)
                        reattached = False  # what answers now is the new submission
                        resubmits += 1
                    ref, state = await self._wait(
                        client, job, deadline, timeout, socket, fresh=fresh
                    )
                    if ref is not None:
                        break
            finally:
                if socket is not None:
                    await socket.close()
            resp = await self.send(client, "GET", "/view", params=ref)
        ctype = resp.headers.get("Content-Type", "")
        if not ctype.startswith("image/"):
            raise self.bad_reply("GET /view", f"content type '{ctype}' is not an image")
        known = job.known or {}
        job.update(state="fetched")
        job.say(f"prompt {known.get('prompt_id')} done{' (re-attached)' if reattached else ''}")
        meta = {
            "seed": values.get("seed"),
            "model": None,
            "revised_prompt": None,
            "prompt_id": known.get("prompt_id"),
            "backend": known.get("backend"),
            "filename": ref["filename"],
            "reattached": reattached,
        }
        return ImageResult(image=resp.content, metadata=meta, usage={"images": 1})

    def _values(self, request: ImageRequest) -> dict[str, Any]:
        """The request fields to substitute; a field the request leaves out keeps the workflow's."""
        values: dict[str, Any] = {"prompt": request.prompt, "width": request.size[0]}
        values["height"] = request.size[1]
        if request.negative_prompt:
            values["negative_prompt"] = request.negative_prompt
        if request.seed is not None:
            values["seed"] = request.seed
        return values

    def _client_id(self, key: str) -> str:
        """The call's own client id: ComfyUI sends a prompt's messages to one socket per id."""
        prefix = self.str_setting("client_id", "runner")
        suffix = hashlib.sha256(key.encode()).hexdigest()[:16] if key else uuid.uuid4().hex[:16]
        return f"{prefix}-{suffix}"

    async def _socket(
        self, client: httpx.AsyncClient, client_id: Any, timeout: float
    ) -> ProgressSocket | None:
        """The /ws socket for ``client_id``, opened before submitting so nothing is missed."""
        if not isinstance(client_id, str) or not self.settings.get("websocket", True):
            return None
        return await ProgressSocket.open(
            backend_of(client), client_id, self.headers(), min(timeout, 5.0)
        )

    def _prompt_id(self, key: str, submission: int) -> str:
        if not key:
            return str(uuid.uuid4())
        digest = hashlib.sha256(f"{key}:{submission}".encode()).hexdigest()
        return str(uuid.UUID(hex=digest[:32]))

    async def _submit(
        self,
        client: httpx.AsyncClient,
        flow: Workflow,
        values: dict[str, Any],
        request: ImageRequest,
        job: RemoteJob,
        client_id: str,
    ) -> None:
        values = dict(values)
        if request.references and flow.reference_slots:
            names = [await self._upload(client, ref) for ref in request.references]
            values["reference"] = names[: flow.reference_slots]
        graph = flow.fill(values)
        # A new id for each submission of the call, so an old history entry never answers it.
        known = job.known or {}
        submission = int(known.get("submission", -1)) + 1 if known else 0
        prompt_id = self._prompt_id(request.idempotency_key, submission)
        # Journaled before it is sent: a crash from here on re-attaches instead of re-queuing.
        job.record(
            {
                "backend": backend_of(client),
                "prompt_id": prompt_id,
                "client_id": client_id,
                "submission": submission,
                "state": "submitting",
                "submitted_at": round(time.time(), 3),
            }
        )
        body = {
            "prompt": graph,
            "client_id": client_id,
            "prompt_id": prompt_id,
        }
        tracker = request.tracker
        if tracker is not None:
            tracker.remote(prompt_id)
        try:
            resp = await self.send(client, "POST", "/prompt", json=body, tracker=tracker)
        except ProviderError as exc:
            if not exc.maybe_executed:
                # Never accepted (refused, or answered with an error): nothing to re-attach to.
                job.update(state="unsent")
                raise
            # The prompt may be queued: the next attempt asks the backend before submitting.
            job.update(state="sent")
            raise self.error(
                f"{exc.message}; the next attempt asks ComfyUI about prompt {prompt_id} and "
                "submits it again only if ComfyUI does not have it",
                transient=True,
                remote_id=prompt_id,
            ) from None
        queued = self.json_of(resp)
        got = queued.get("prompt_id")
        if not isinstance(got, str) or not got:
            raise self.bad_reply("POST /prompt", "no prompt_id in the reply")
        # Accepted with node_errors: ComfyUI runs only the outputs that validated and drops the
        # others (execution.validate_prompt); the user hears which, and why, in its words.
        dropped = _node_error_lines(queued.get("node_errors"))
        job.update(
            prompt_id=got,
            state="queued",
            number=queued.get("number"),
            **({"dropped": dropped} if dropped else {}),
        )
        if tracker is not None:
            tracker.remote(got)  # an older ComfyUI picks its own id
        if dropped:
            line = f"ComfyUI accepted prompt {got} but will not run: {'; '.join(dropped)}"
            job.say(line)
            tell(f"{self.name}: {line}")  # on the console: outputs silently missing otherwise

    def status_error(self, what: str, resp: httpx.Response) -> ProviderError:
        if what != "POST /prompt" or resp.status_code != 400:
            return super().status_error(what, resp)
        return self.error(
            f"{asked_url(resp.request)} -> HTTP 400: {_prompt_refusal(resp)}",
            transient=False,
            status=400,
        )

    async def _upload(self, client: httpx.AsyncClient, data: bytes) -> str:
        # Named by content, so uploading it again (a retry) overwrites the same file.
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

    # --- the job --------------------------------------------------------------------------------

    async def _reattach(self, client: httpx.AsyncClient, job: RemoteJob) -> str | None:
        """``"known"`` when the journaled job is still the backend's, else None (submit)."""
        known = job.known
        if not known or known.get("state") in ("failed", "unsent") or not known.get("prompt_id"):
            return None
        if known.get("backend") and known["backend"] != backend_of(client):
            # Another backend has the job (a pool): that one is asked, never this one.
            raise self.error(
                f"prompt {known['prompt_id']} runs on {known['backend']}, not {backend_of(client)}",
                transient=False,
            )
        return "known"

    async def _wait(
        self,
        client: httpx.AsyncClient,
        job: RemoteJob,
        deadline: float,
        timeout: float,
        socket: ProgressSocket | None = None,
        *,
        fresh: bool = False,
    ) -> tuple[dict[str, str] | None, str | None]:
        """Wait for the job until its image is ready: (view params, _) or (None, None) when the
        backend no longer knows it (submit again). Raises when it failed or time ran out.
        Between looks at /history, the socket (while up) says progress and wakes the wait when
        the job ends; without it, the wait is ``poll_interval``."""
        interval = self.float_setting("poll_interval", 0.5)
        prompt_id = str((job.known or {}).get("prompt_id"))
        if socket is not None:
            socket.watch(prompt_id, job.say, backend_of(client))
        url = f"/history/{prompt_id}"
        # A prompt this call just submitted was accepted into the queue (POST /prompt queues it
        # before answering): gone before it was seen running, it was deleted, not forgotten.
        where: str | None = "queued (just submitted)" if fresh else None
        while True:
            seen, where = where, None
            entry = await self._history(client, prompt_id)
            if entry is not None:
                found = self._finished(job, entry, url)
                if found is not None:
                    return found, "done"
            else:
                where = await self._queued(client, prompt_id)
                if where is None:
                    # Not queued, not running: finished in between, or forgotten (a restart).
                    if await self._history(client, prompt_id) is None:
                        if seen is not None and seen.startswith("queued"):
                            raise self._deleted(job, prompt_id, backend_of(client))
                        return None, None
                    continue
            if entry is None:
                job.say(f"prompt {prompt_id} {where} on {backend_of(client)}")
                ahead = _AHEAD.fullmatch(where or "")
                if ahead is not None and ahead[1] != "0":  # behind another client's work
                    job.queued(f"queued, {ahead[1]} ahead on {backend_of(client)}")
            listening = socket is not None and socket.alive
            if time.monotonic() + (0.0 if listening else interval) >= deadline:
                position = "running" if where == "running" else "queued"
                raise self.error(
                    f"prompt {prompt_id} is still {position} on {backend_of(client)} after "
                    f"{timeout} s; it keeps running there and the next attempt re-attaches to it",
                    transient=True,
                    remote_id=prompt_id,
                )
            if socket is not None and listening:
                await socket.wait(min(max(interval, SOCKET_POLL), deadline - time.monotonic()))
            else:
                await asyncio.sleep(interval)

    def _deleted(self, job: RemoteJob, prompt_id: str, backend: str) -> ProviderError:
        """Queued at the last look, now neither queued, running nor in the history: someone took
        it out of the queue (POST /queue delete or clear, which leave no trace; a restart takes
        longer than one look and cuts the connection). It never ran, and it is not paid for
        again behind the user's back: the call fails, and the next apply submits it anew."""
        job.update(state="failed")
        return self.error(
            f"prompt {prompt_id} was deleted from the queue of {backend} before it ran; it is "
            "not submitted again in this run (apply again to submit it anew)",
            transient=False,
        )

    async def _history(self, client: httpx.AsyncClient, prompt_id: str) -> dict[str, Any] | None:
        entry = self.json_of(await self.send(client, "GET", f"/history/{prompt_id}")).get(prompt_id)
        return entry if isinstance(entry, dict) else None

    async def _queued(self, client: httpx.AsyncClient, prompt_id: str) -> str | None:
        """Where GET /queue has the prompt: "running", "queued (N ahead)", or None."""
        queue = self.json_of(await self.send(client, "GET", "/queue"))
        running = queue.get("queue_running")
        pending = queue.get("queue_pending")
        items = {
            "running": running if isinstance(running, list) else [],
            "pending": pending if isinstance(pending, list) else [],
        }
        jobs = [
            i for i in items["running"] + items["pending"] if isinstance(i, list) and len(i) > 1
        ]
        for item in jobs:
            if item[1] != prompt_id:
                continue
            if item in items["running"]:
                return "running"
            # The queue is ordered by each item's number (the first element).
            ahead = sum(1 for other in jobs if _number(other) < _number(item))
            return f"queued ({ahead} ahead)"
        return None

    def _finished(self, job: RemoteJob, entry: dict[str, Any], url: str) -> dict[str, str] | None:
        status = entry.get("status") if isinstance(entry.get("status"), dict) else {}
        assert isinstance(status, dict)
        if status.get("status_str") == "error":
            job.update(state="failed")  # the next apply submits it again, under a new id
            raise self._execution_error(url, status)
        outputs = entry.get("outputs")
        if not isinstance(outputs, dict) or not outputs:
            if status.get("completed"):
                job.update(state="failed")
                dropped = (job.known or {}).get("dropped") or []
                why = f" (ComfyUI did not run: {'; '.join(dropped)})" if dropped else ""
                raise self.bad_reply(url, f"the workflow finished without an image output{why}")
            return None
        wanted = self.settings.get("output_node")
        candidates: list[dict[str, Any]] = []
        for node_id in sorted(outputs, key=str):
            if wanted is not None and str(wanted) != node_id:
                continue
            images = outputs[node_id].get("images") if isinstance(outputs[node_id], dict) else None
            found = [i for i in images or [] if isinstance(i, dict) and "filename" in i]
            saved = [i for i in found if i.get("type", "output") == "output"]
            if len(saved) > 1:  # a batch the workflow check could not see (a linked batch size)
                job.update(state="failed")
                raise self.bad_reply(
                    url,
                    f"node {node_id} saved {len(saved)} images for one call; runner takes one "
                    "image per call and drops none silently: make the workflow's batch 1 and "
                    "ask the image step for n",
                )
            candidates.extend({**i, "_node": node_id} for i in found)
        # Saved outputs beat previews (type "temp").
        candidates.sort(key=lambda i: i.get("type") != "output")
        best = (
            [i for i in candidates if i.get("type") == candidates[0].get("type")]
            if candidates
            else []
        )
        nodes = sorted({str(i["_node"]) for i in best})
        if wanted is None and len(nodes) > 1:  # nodes the workflow check could not tell apart
            job.update(state="failed")
            raise self.bad_reply(
                url,
                f"nodes {', '.join(nodes)} each gave an image and runner keeps one per call; "
                f'set output_node = "{nodes[0]}" (or another of them) in runner.toml',
            )
        if candidates:
            img = candidates[0]
            return {
                "filename": str(img["filename"]),
                "subfolder": str(img.get("subfolder", "")),
                "type": str(img.get("type", "output")),
            }
        job.update(state="failed")
        raise self.bad_reply(url, "the workflow finished without an image output")

    def _execution_error(self, url: str, status: dict[str, Any]) -> ProviderError:
        detail = ""
        for msg in status.get("messages") or []:
            if not (isinstance(msg, list) and len(msg) == 2 and isinstance(msg[1], dict)):
                continue
            info = msg[1]
            where = f"node {info.get('node_id', '?')} ({info.get('node_type', '?')})"
            if msg[0] == "execution_error":
                kind = info.get("exception_type")
                detail = f"{where}: {str(info.get('exception_message', '')).strip()}" + (
                    f" [{kind}]" if kind else ""
                )
            elif msg[0] == "execution_interrupted":  # someone pressed Cancel (POST /interrupt)
                return self.error(
                    f"{url}: the prompt was interrupted on the server at {where}; the next "
                    "apply submits it again",
                    transient=False,
                )
        return self.error(f"{url}: workflow failed: {detail or 'execution error'}", transient=False)


def _number(item: list[Any]) -> float:
    value = item[0]
    return float(value) if isinstance(value, (int, float)) else 0.0


def _prompt_refusal(resp: httpx.Response) -> str:
    """ComfyUI's refusal of a prompt, in its words: error.message, details, each node error."""
    try:
        body = loads_strict(resp.content)
    except ValueError:
        return backend_message(resp)
    if not isinstance(body, dict):
        return backend_message(resp)
    err = body.get("error")
    parts: list[str] = []
    if isinstance(err, dict):
        head = str(err.get("message") or err.get("type") or "")
        details = err.get("details")
        if details and not body.get("node_errors"):  # node errors say it better, per node
            head = f"{head} ({details})"
        parts.append(head)
    elif err:
        parts.append(str(err))
    parts.extend(_node_error_lines(body.get("node_errors")))
    return "; ".join(p for p in parts if p) or backend_message(resp)


def _node_error_lines(node_errors: Any) -> list[str]:
    """ComfyUI's per-node validation errors, one line each: "node ID (class): message: details"."""
    lines: list[str] = []
    if isinstance(node_errors, dict):
        for node_id, info in sorted(node_errors.items(), key=lambda kv: str(kv[0])):
            if not isinstance(info, dict):
                continue
            for e in info.get("errors") or []:
                if isinstance(e, dict):
                    lines.append(
                        f"node {node_id} ({info.get('class_type')}): "
                        f"{e.get('message')}: {e.get('details')}"
                    )
    return lines
