"""A loopback OpenAI (and Azure OpenAI) server written from OpenAI's OpenAPI spec.

Facts from openai/openai-openapi (openapi.yaml): the paths /images/generations (JSON),
/images/edits (multipart ``image``/``image[]``, up to 16 png/webp/jpg files) and
/chat/completions; ImagesResponse {created, data: [{b64_json | url, revised_prompt}], usage
{input_tokens, output_tokens, total_tokens}}; CreateChatCompletionResponse {id, object, created,
model, choices: [{index, message {role, content, refusal, annotations}, logprobs, finish_reason}],
usage}; ErrorResponse {error: {message, type, param, code}} (all four present, param and code may
be null); ``max_tokens`` deprecated and "not compatible with o-series models"; ``json_object``:
"the model will not generate JSON without a system or user message instructing it to do so"
(the API answers 400 when no message says JSON); ResponseFormatJsonSchema {name, schema, strict};
GPT image models always answer b64_json, dall-e models a ``url`` by default.

What it does not do, as the spec does not document it: honour an Idempotency-Key. Every request
that passes validation is generated and billed, counted server-side in ``billed`` when its work
(``work_s``) is done, whether or not the client is still there to read the reply.

Azure OpenAI: /openai/v1/... takes the same requests; the classic
/openai/deployments/{name}/... needs ``?api-version=`` (else 404 "Resource not found") and takes
the key in an ``api-key`` header (Azure's error shape is {error: {code, message}}).
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from typing import Any

from .servers import ProtocolServer, Recorded, Reply, b64, colour_of, png

REASONING = re.compile(r"^(o\d|gpt-5)")
GPT_IMAGE = re.compile(r"^gpt-image")
MIMES = {"image/png": b"\x89PNG", "image/jpeg": b"\xff\xd8\xff", "image/webp": b"RIFF"}
EXTENSIONS = {"png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "webp": "image/webp"}
REFUSE = "[[REFUSE]]"  # a prompt containing it is declined by the model


def error(
    status: int, message: str, type_: str, param: str | None = None, code: str | None = None
) -> Reply:
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return Reply(status, body, headers={"x-request-id": f"req_{uuid.uuid4().hex}"})


def invalid(message: str, param: str | None = None, code: str | None = None) -> Reply:
    return error(400, message, "invalid_request_error", param, code)


class OpenAIServer(ProtocolServer):
    """OpenAI's images and chat endpoints under /v1, and Azure's under /openai/..."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        project: str | None = None,
        work_s: float = 0.0,
        quota: int | None = None,
    ) -> None:
        super().__init__()
        self.api_key = api_key  # None: any key (or none) is accepted
        self.project = project  # the project the key belongs to: OpenAI-Project must match
        self.work_s = work_s  # how long each generation takes
        self.quota = quota  # billed generations left on the account (None: unlimited)
        self.billed = 0
        self.billed_lock = threading.Lock()
        self._working = 0
        self._idle = threading.Condition(self.billed_lock)
        self.downloads: list[Recorded] = []
        self._files: dict[str, bytes] = {}  # images served at /files/ for dall-e's url replies
        prefixes = ("/v1", "/openai/v1", "/openai/deployments/[^/]+")
        for prefix in prefixes:
            self.route("POST", prefix + "/images/generations", self._guarded(self._generate))
            self.route("POST", prefix + "/images/edits", self._guarded(self._edit))
            self.route("POST", prefix + "/chat/completions", self._guarded(self._chat))
        self.route("GET", "/files/.*", self._file)

    # --- what every call goes through --------------------------------------------------------

    def _guarded(self, handler: Any) -> Any:
        def serve(rec: Recorded) -> Reply:
            azure = rec.path.startswith("/openai/")
            refused = self._refuse(rec, azure)
            if refused is not None:
                return refused
            with self._idle:
                self._working += 1
            try:
                reply: Reply = handler(rec)
                if reply.status == 200:
                    time.sleep(self.work_s)  # the work goes on even if the client gave up
                    with self.billed_lock:
                        if self.quota is not None and self.billed >= self.quota:
                            return self._no_quota()
                        self.billed += 1
                    reply.headers.setdefault("x-request-id", f"req_{uuid.uuid4().hex}")
                return reply
            finally:
                with self._idle:
                    self._working -= 1
                    self._idle.notify_all()

        return serve

    def settled(self, timeout: float = 30.0) -> int:
        """Wait until no request is being worked on; the number of billed generations."""
        with self._idle:
            if not self._idle.wait_for(lambda: self._working == 0, timeout=timeout):
                raise AssertionError("the server is still working")
            return self.billed

    def _refuse(self, rec: Recorded, azure: bool) -> Reply | None:
        if azure and "/deployments/" in rec.path and "api-version" not in rec.query:
            return Reply(404, {"error": {"code": "404", "message": "Resource not found"}})
        if self.api_key is not None:
            given = rec.headers.get("api-key") if azure else None
            auth = rec.headers.get("authorization", "")
            if given is None and auth.startswith("Bearer "):
                given = auth.removeprefix("Bearer ")
            if azure and given != self.api_key:
                return Reply(
                    401,
                    {
                        "error": {
                            "code": "401",
                            "message": "Access denied due to invalid subscription key or wrong "
                            "API endpoint. Make sure to provide a valid key for an active "
                            "subscription and use a correct regional API endpoint for your "
                            "resource.",
                        }
                    },
                )
            if not given:
                return error(
                    401,
                    "You didn't provide an API key. You need to provide your API key in an "
                    "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                    "invalid_request_error",
                )
            if given != self.api_key:
                # The real service echoes the key it was given, masked but for its ends.
                return error(
                    401,
                    f"Incorrect API key provided: {given}. You can find your API key at "
                    "https://platform.openai.com/account/api-keys.",
                    "invalid_request_error",
                    code="invalid_api_key",
                )
        project = rec.headers.get("openai-project")
        if self.project is not None and project is not None and project != self.project:
            return error(
                401,
                "OpenAI-Project header should match project for API key",
                "invalid_request_error",
                code="mismatched_project",
            )
        return None

    def _no_quota(self) -> Reply:
        return error(
            429,
            "You exceeded your current quota, please check your plan and billing details. For "
            "more information on this error, read the docs: "
            "https://platform.openai.com/docs/guides/error-codes/api-errors.",
            "insufficient_quota",
            code="insufficient_quota",
        )

    # --- images -----------------------------------------------------------------------------

    def _image_reply(self, rec: Recorded, model: str, prompt: str, size: str, fmt: Any) -> Reply:
        w, _, h = size.partition("x")
        if not (w.isdigit() and h.isdigit()):
            return invalid(
                f"Invalid value: '{size}'. Supported values are: '1024x1024', "
                "'1024x1536', '1536x1024', and 'auto'.",
                "size",
                "invalid_value",
            )
        image = png(colour_of(prompt), (int(w), int(h)))
        item: dict[str, Any]
        if not model.startswith("dall-e") or fmt == "b64_json":
            item = {"b64_json": b64(image)}
        else:  # dall-e's default: a URL on another host, valid for an hour
            name = f"{uuid.uuid4().hex}.png"
            self._files[name] = image
            item = {"url": f"{self.url}/files/{name}"}
        if model == "dall-e-3":
            item["revised_prompt"] = f"revised {prompt}"
        body: dict[str, Any] = {"created": int(time.time()), "data": [item]}
        if GPT_IMAGE.match(model):
            body["usage"] = {"input_tokens": 7, "output_tokens": 100, "total_tokens": 107}
        return Reply(body=body)

    def _generate(self, rec: Recorded) -> Reply:
        body = rec.json()
        if not body.get("prompt"):
            return invalid(
                "Missing required parameter: 'prompt'.", "prompt", "missing_required_parameter"
            )
        model = str(body.get("model") or "dall-e-2")  # the spec's default model
        if GPT_IMAGE.match(model) and "response_format" in body:
            return invalid(
                "Unknown parameter: 'response_format'.", "response_format", "unknown_parameter"
            )
        return self._image_reply(
            rec,
            model,
            body["prompt"],
            str(body.get("size", "1024x1024")),
            body.get("response_format"),
        )

    def _edit(self, rec: Recorded) -> Reply:
        parts = rec.parts_with_types()
        fields = {name: data.decode() for name, fn, _ct, data in parts if fn is None}
        images = [(fn, ct, data) for name, fn, ct, data in parts if name in ("image", "image[]")]
        if not images:
            return invalid(
                "Missing required parameter: 'image'.", "image", "missing_required_parameter"
            )
        if len(images) > 16:
            return invalid("Invalid 'image': too many images, the maximum is 16.", "image")
        for i, (fn, ct, data) in enumerate(images):
            ext = (fn or "").rpartition(".")[2].lower()
            declared = ct if ct in MIMES else EXTENSIONS.get(ext)
            if declared is None:
                return invalid(
                    f"Invalid file 'image[{i}]': unsupported mimetype ('{ct}'). Supported file "
                    "formats are 'image/jpeg', 'image/png', and 'image/webp'.",
                    "image",
                    "unsupported_file_mimetype",
                )
            if not data.startswith(MIMES[declared]) or EXTENSIONS.get(ext, declared) != declared:
                return invalid(
                    f"Invalid image file or mode for image {i + 1}, please check your image file.",
                    "image",
                    "invalid_image_file",
                )
        model = fields.get("model") or "dall-e-2"
        return self._image_reply(
            rec,
            model,
            fields.get("prompt", ""),
            fields.get("size", "1024x1024"),
            fields.get("response_format"),
        )

    def _file(self, rec: Recorded) -> Reply:
        self.downloads.append(rec)
        data = self._files.get(rec.path.rsplit("/", 1)[1])
        if data is None:
            return Reply(404, b"<Error><Code>BlobNotFound</Code></Error>", "application/xml")
        return Reply(body=data, content_type="image/png")

    # --- chat -------------------------------------------------------------------------------

    def _chat(self, rec: Recorded) -> Reply:
        body = rec.json()
        model = str(body.get("model", ""))
        messages = body.get("messages") or []
        if REASONING.match(model) and "max_tokens" in body:
            return invalid(
                "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                "'max_completion_tokens' instead.",
                "max_tokens",
                "unsupported_parameter",
            )
        fmt = body.get("response_format") or {}
        texts = [self._text(m.get("content")) for m in messages]
        if fmt.get("type") == "json_object" and not any("json" in t.lower() for t in texts):
            return invalid(
                "'messages' must contain the word 'json' in some form, to use 'response_format' "
                "of type 'json_object'.",
                "messages",
            )
        if fmt.get("type") == "json_schema":
            spec = fmt.get("json_schema") or {}
            if not spec.get("name"):
                return invalid(
                    "Missing required parameter: 'response_format.json_schema.name'.",
                    "response_format.json_schema.name",
                    "missing_required_parameter",
                )
            schema = spec.get("schema") or {}
            if spec.get("strict") is True and schema.get("additionalProperties") is not False:
                return invalid(
                    f"Invalid schema for response_format '{spec['name']}': In context=(), "
                    "'additionalProperties' is required to be supplied and to be false.",
                    "response_format",
                    "invalid_json_schema",
                )
        last = texts[-1] if texts else ""
        refusal = None
        if REFUSE in " ".join(texts):
            content, refusal = None, "I'm sorry, but I can't help with that request."
        elif fmt.get("type") in ("json_object", "json_schema"):
            content = f'{{"echo": {json.dumps(last)}}}'
        else:
            content = f"echo: {last}"
        return Reply(
            body={
                "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": content,
                            "refusal": refusal,
                            "annotations": [],
                        },
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
                "system_fingerprint": "fp_loopback",
            }
        )

    @staticmethod
    def _text(content: Any) -> str:
        if isinstance(content, list):
            return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        return str(content or "")
