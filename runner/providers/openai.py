"""OpenAI, Azure OpenAI and any OpenAI-compatible server: images and chat completions.

Images: POST {base}/images/generations (JSON), or POST {base}/images/edits (multipart, ``image[]``
up to 16, each with its real content type and file extension) when references are given.
Text: POST {base}/chat/completions. ``base_url`` includes the API version path, as OpenAI's own
clients do (".../v1"). The protocol points, as OpenAI's API reference (openai/openai-openapi)
states them:

- ``max_tokens`` is deprecated and rejected by reasoning models: models named ``o<digit>...``
  (o1, o3, o4-mini, ...) or ``gpt-5...`` get ``max_completion_tokens``, every other model (and
  OpenAI-compatible servers, which may not know the new name) ``max_tokens``. The setting
  ``max_tokens_param`` ("max_tokens" or "max_completion_tokens") overrides the rule.
- ``project`` and ``organization`` go out as the OpenAI-Project and OpenAI-Organization headers.
- Azure OpenAI: ``base_url = "https://RES.openai.azure.com/openai/v1"``, or the classic
  ``".../openai/deployments/NAME"`` with ``api_version`` (or ``?api-version=...`` in the
  base_url: the query is kept after each request's path). The key goes in an ``api-key``
  header for ``*.azure.com`` hosts (``api_key_header`` overrides: "authorization" or "api-key").
- ``response_format: json_object`` needs the word JSON in the messages: a system line asking for
  a JSON object is added when no message mentions it. Structured output (a schema) sends
  ``strict: true`` when the step's ``params.strict`` or the ``strict_schema`` setting asks.
- Structured output goes out in the form the server takes (setting ``structured_output``):
  ``json_schema`` (OpenAI's ``{type: json_schema, json_schema: {name, schema}}``),
  ``json_object_schema`` (``{type: json_object, schema}``: llama-cpp-python, whose server
  refuses the first with HTTP 500 "Input should be 'text' or 'json_object'"), ``json_object``
  (JSON mode, the schema told in a system message) or ``prompt`` (no response_format: the
  schema in a system message). Unset, OpenAI and Azure get ``json_schema``; another server is
  asked ``GET /models`` once (llama-cpp-python answers ``owned_by: "me"``), and a server that
  refuses the form it was sent (4xx/5xx naming ``json_schema`` or ``response_format``) gets the
  next form at once: nothing was generated, so nothing is paid twice. runner checks the reply
  against the schema whatever the form.
- A ``refusal`` in the reply is returned as such (metadata ``refusal``), never parsed as JSON.
- ``url`` replies are fetched with a client that carries no credentials.

The idempotency key goes out as an Idempotency-Key header, but the API reference does not
document it, so nothing relies on it: a lost reply is MAYBE_EXECUTED (see _http.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from ..errors import ProviderError
from ._http import HttpProvider, b64decode, b64encode, tls_context, usage_ints
from ._httpx import httpx
from .base import (
    Capabilities,
    ImageRequest,
    ImageResult,
    ProviderConfigError,
    TextRequest,
    TextResult,
)
from .honours import TEXT_FIELDS, Honours
from .usage import text_usage

if TYPE_CHECKING:
    from .openai_batch import OpenAIBatches

MAX_REFERENCES = 16
# The sizes the Images API takes, per model family (its reference for `size`); "auto" is not a
# size a step can ask for.
IMAGE_SIZES: dict[str, tuple[str, ...]] = {
    "dall-e-2": ("256x256", "512x512", "1024x1024"),
    "dall-e-3": ("1024x1024", "1792x1024", "1024x1792"),
    "gpt-image-1": ("1024x1024", "1536x1024", "1024x1536"),
}
# Reasoning models reject max_tokens ("Use 'max_completion_tokens' instead").
_COMPLETION_TOKENS_MODELS = re.compile(r"^(o\d|gpt-5)", re.IGNORECASE)
_JSON_WORD = re.compile(r"json", re.IGNORECASE)
JSON_INSTRUCTION = "Reply with a JSON object."
SCHEMA_INSTRUCTION = "Reply with only a JSON object that matches this JSON Schema: "
STRUCTURED_FORMS = ("json_schema", "json_object_schema", "json_object", "prompt")
# A server's refusal of the response_format it was sent (not of the request's content).
_FORM_REFUSED = re.compile(
    r"(?is)'text' or 'json_object'|response_format\W{0,5}type\b|"
    r"json_schema\W{0,20}(is\s+)?(not supported|unsupported|unknown)|"
    r"(not supported|unsupported|unknown)\W{0,20}(response_format|json_schema)"
)
# llama-cpp-python's server names itself so in GET /v1/models; it takes json_object + schema.
_OWNER_FORMS = {"me": "json_object_schema"}
_MAGIC: tuple[tuple[bytes, int, str, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png", "png"),
    (b"\xff\xd8\xff", 0, "image/jpeg", "jpg"),
    (b"WEBP", 8, "image/webp", "webp"),
    (b"GIF8", 0, "image/gif", "gif"),
)


def image_type(data: bytes) -> tuple[str, str]:
    """(content type, file extension) of encoded image bytes, from their signature."""
    for magic, offset, mime, ext in _MAGIC:
        if data[offset : offset + len(magic)] == magic:
            return mime, ext
    return "application/octet-stream", "bin"


def max_tokens_field(model: str, override: str | None = None) -> str:
    """The request field that carries the token limit for ``model`` (see the module docstring)."""
    if override:
        return override
    return "max_completion_tokens" if _COMPLETION_TOKENS_MODELS.match(model) else "max_tokens"


def mentions_json(messages: list[dict[str, Any]]) -> bool:
    for m in messages:
        content = m.get("content")
        parts = content if isinstance(content, list) else [content]
        for part in parts:
            text = part.get("text") if isinstance(part, dict) else part
            if isinstance(text, str) and _JSON_WORD.search(text):
                return True
    return False


class OpenAIProvider(HttpProvider):
    """OpenAI images + chat completions over HTTP (OpenAI, Azure OpenAI, compatible servers)."""

    key: ClassVar[str] = "openai"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "OpenAI, Azure OpenAI or an OpenAI-compatible server"
    default_base_url: ClassVar[str] = "https://api.openai.com/v1"
    default_capabilities: ClassVar[Capabilities] = Capabilities(
        kinds=frozenset({"image", "text"}),
        supports_seed=False,  # the images API takes no seed
        supports_reference_image=True,
        max_concurrency=4,
        accepts_idempotency_key=False,  # not in OpenAI's API reference: never relied upon
    )
    # The images API has neither a negative prompt nor a seed: generate_image never sends them.
    not_sent: ClassVar[Mapping[str, frozenset[str]]] = {
        "image": frozenset({"negative_prompt", "seed"})
    }
    known_settings: ClassVar[frozenset[str]] = frozenset(
        {
            "base_url",
            "model",
            "image_model",
            "api_key_env",
            "organization",
            "project",
            "api_version",
            "api_key_header",
            "max_tokens_param",
            "strict_schema",
            "structured_output",
            "params",
        }
    )
    # How a schema is put on the wire, not what is asked: the same reply, the same profile.
    operational_settings: ClassVar[frozenset[str]] = HttpProvider.operational_settings | {
        "structured_output",
        # batch mode: how long an apply waits on a running batch, and a smaller split
        "batch_wait",
        "batch_max_requests",
    }
    defaults: ClassVar[dict[str, Any]] = {
        "model": "gpt-4o-mini",
        "image_model": "gpt-image-1",
        "api_key_env": "OPENAI_API_KEY",
    }

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # A query in base_url (Azure's ?api-version=...) belongs after each request's path;
        # httpx would glue the path onto the query. api-version becomes the api_version setting.
        base = self.settings.get("base_url")
        self._query: dict[str, str] = {}
        if isinstance(base, str) and "?" in base:
            split = urlsplit(base)
            self.settings["base_url"] = urlunsplit(split._replace(query="", fragment=""))
            self._query = dict(parse_qsl(split.query))
            version = self._query.pop("api-version", None)
            if version and "api_version" not in self.settings:
                self.settings["api_version"] = version
        self._form: str | None = None  # the structured-output form found to work
        for name in ("api_key_header", "max_tokens_param", "structured_output"):
            allowed = {
                "api_key_header": ("authorization", "api-key"),
                "max_tokens_param": ("max_tokens", "max_completion_tokens"),
                "structured_output": STRUCTURED_FORMS,
            }[name]
            if self.settings.get(name, allowed[0]) not in allowed:
                raise ProviderConfigError(
                    f"provider '{self.name}': {name} must be one of {', '.join(allowed)}"
                )

    # --- requests ---------------------------------------------------------------------------

    def query(self) -> dict[str, str]:
        """Query parameters every request carries (Azure's api-version)."""
        version = self.str_setting("api_version")
        return {**self._query, **({"api-version": version} if version else {})}

    def headers(self) -> dict[str, str]:
        h = super().headers()
        key = self.secrets.get("api_key")
        if key:
            if self._key_header() == "api-key":
                h["api-key"] = key
            else:
                h["Authorization"] = f"Bearer {key}"
        for setting, header in (
            ("organization", "OpenAI-Organization"),
            ("project", "OpenAI-Project"),
        ):
            value = self.str_setting(setting)
            if value:
                h[header] = value
        return h

    def _key_header(self) -> str:
        explicit = self.settings.get("api_key_header")
        if isinstance(explicit, str):
            return explicit
        host = urlsplit(str(self.settings.get("base_url") or self.default_base_url)).hostname or ""
        return "api-key" if host.endswith(".azure.com") else "authorization"

    def _call_headers(self, idempotency_key: str) -> dict[str, str]:
        return {"Idempotency-Key": idempotency_key} if idempotency_key else {}

    def _params(self, request_params: dict[str, Any]) -> dict[str, Any]:
        base = self.settings.get("params", {})
        return {**(base if isinstance(base, dict) else {}), **request_params}

    async def _post(
        self, client: httpx.AsyncClient, url: str, request: ImageRequest | TextRequest, **kw: Any
    ) -> dict[str, Any]:
        resp = await self.send(
            client,
            "POST",
            url,
            params=self.query(),
            headers=self._call_headers(request.idempotency_key),
            tracker=request.tracker,
            **kw,
        )
        reply = self.json_of(resp)
        # The backend's id for the call (a support ticket names it): the reply's, else the header.
        remote = reply.get("id") or resp.headers.get("x-request-id")
        if request.tracker is not None and isinstance(remote, str) and remote:
            request.tracker.remote(remote, answered=True)
        return reply

    # --- images -----------------------------------------------------------------------------

    def honours(self, kind: str) -> Honours:
        if kind == "image":
            return Honours(
                fields=frozenset({"size", "references"}),
                missing={
                    "negative_prompt": "OpenAI's images API takes no negative prompt: say what "
                    "to leave out in the prompt itself",
                    "seed": "OpenAI's images API takes no seed",
                },
                refused_params={
                    "n": "runner makes one image per call (its own key and ledger row): ask the "
                    "step for n: instead",
                    "stream": "runner reads one whole image per call; streamed partial images "
                    "would be paid for and not read",
                },
            )
        return Honours(
            fields=TEXT_FIELDS,
            refused_params={
                "stream": "the openai provider reads one JSON reply, not a stream of "
                "server-sent events: the server would generate the whole reply and runner "
                "record it failed; drop params.stream",
                "n": "runner keeps one reply per call: the other choices would be paid for "
                "and dropped",
            },
        )

    def size_refused(
        self, size: tuple[int, int], params: Mapping[str, Any]
    ) -> tuple[str, str] | None:
        base = str(self.settings.get("base_url") or self.default_base_url)
        if urlsplit(base).hostname != urlsplit(self.default_base_url).hostname:
            return None  # Azure, a compatible server, a local stand-in: their own sizes
        model = str(params.get("model") or self.settings["image_model"])
        # the longest known family the model belongs to (gpt-image-1-mini is a gpt-image-1)
        family = max((f for f in IMAGE_SIZES if model.startswith(f)), key=len, default=None)
        if family is None or f"{size[0]}x{size[1]}" in IMAGE_SIZES[family]:
            return None  # a model not known here: not checked
        return f"model {model} takes only some sizes", ", ".join(IMAGE_SIZES[family])

    async def generate_image(self, request: ImageRequest) -> ImageResult:
        model = str(request.params.get("model") or self.settings["image_model"])
        size = f"{request.size[0]}x{request.size[1]}"
        params = {k: v for k, v in self._params(request.params).items() if k != "model"}
        async with self.client(request.timeout) as client:
            if request.references:
                url = "images/edits"
                files = []
                for i, ref in enumerate(request.references[:MAX_REFERENCES]):
                    mime, ext = image_type(ref)
                    files.append(("image[]", (f"reference-{i}.{ext}", ref, mime)))
                form = {"prompt": request.prompt, "model": model, "n": "1", "size": size}
                form.update({k: str(v) for k, v in params.items()})
                reply = await self._post(client, url, request, data=form, files=files)
            else:
                url = "images/generations"
                reply = await self._post(client, url, request, json=self.image_body(request))
            data = reply.get("data")
            if not isinstance(data, list) or not data or not isinstance(data[0], dict):
                raise self.bad_reply(f"POST {url}", "no data[0] in the reply")
            first = data[0]
            if first.get("b64_json"):
                try:
                    image = b64decode(first["b64_json"], "data[0].b64_json")
                except ValueError as exc:
                    raise self.bad_reply(f"POST {url}", str(exc)) from None
            elif isinstance(first.get("url"), str):
                image = await self._download(client, first["url"])
            else:
                raise self.bad_reply(f"POST {url}", "data[0] has neither b64_json nor url")
        meta = {"model": model, "seed": None, "revised_prompt": first.get("revised_prompt")}
        usage = usage_ints(
            reply.get("usage"),
            {
                "input_tokens": "prompt_tokens",
                "output_tokens": "completion_tokens",
                "total_tokens": "total_tokens",
            },
        )
        return ImageResult(image=image, metadata=meta, usage=usage)

    def image_body(self, request: ImageRequest) -> dict[str, Any]:
        """The JSON body of ``request`` (no references) on /images/generations: what a direct
        call sends, and a batch line's ``body`` (openai_batch.py)."""
        model = str(request.params.get("model") or self.settings["image_model"])
        size = f"{request.size[0]}x{request.size[1]}"
        params = {k: v for k, v in self._params(request.params).items() if k != "model"}
        return {"model": model, "prompt": request.prompt, "n": 1, "size": size, **params}

    async def _download(self, client: httpx.AsyncClient, url: str) -> bytes:
        # A hosted URL is on another origin: fetch it with a client that carries no credentials.
        if urlsplit(url).scheme not in ("http", "https"):
            raise self.bad_reply("data[0].url", f"not an http(s) URL: {url[:100]!r}")
        async with httpx.AsyncClient(
            timeout=client.timeout, trust_env=False, verify=tls_context()
        ) as plain:
            resp = await self.send(plain, "GET", url)
        ctype = resp.headers.get("Content-Type", "")
        if not ctype.startswith("image/"):
            raise self.bad_reply(f"GET {url}", f"content type '{ctype}' is not an image")
        return resp.content

    # --- chat -------------------------------------------------------------------------------

    async def generate_text(self, request: TextRequest) -> TextResult:
        body = self.chat_body(request)
        url = "chat/completions"
        form: str | None = None
        async with self.client(request.timeout) as client:
            if request.json_schema is None:
                reply = await self._post(client, url, request, json=body)
            else:
                form = await self._structured_form(client)
                while True:
                    sent = _with_schema(body, request.json_schema, self._strict(request), form)
                    try:
                        reply = await self._post(client, url, request, json=sent)
                        break
                    except ProviderError as exc:
                        form = self._next_form(form, exc)
                self._form = form
        return self.chat_result(reply, request, form)

    def _strict(self, request: TextRequest) -> Any:
        strict = self._params(request.params).get("strict")
        return self.settings.get("strict_schema") if strict is None else strict

    def chat_body(self, request: TextRequest, form: str | None = None) -> dict[str, Any]:
        """The JSON body of ``request`` on /chat/completions (with its schema in ``form``, when
        given): what a direct call sends, and a batch line's ``body`` (openai_batch.py)."""
        model = request.model or str(self.settings["model"])
        params = self._params(request.params)
        params.pop("strict", None)
        messages = [self._message(m) for m in request.messages]
        body: dict[str, Any] = {"model": model, "messages": messages, **params}
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.seed is not None:
            body["seed"] = request.seed
        if request.max_tokens is not None:
            override = self.settings.get("max_tokens_param")
            field = max_tokens_field(model, override if isinstance(override, str) else None)
            body[field] = request.max_tokens
        if request.json_schema is None and request.format == "json":
            body["response_format"] = {"type": "json_object"}
            if not mentions_json(messages):  # the API refuses json_object otherwise
                body["messages"] = [{"role": "system", "content": JSON_INSTRUCTION}, *messages]
        if form is not None and request.json_schema is not None:
            body = _with_schema(body, request.json_schema, self._strict(request), form)
        return body

    def chat_result(
        self, reply: dict[str, Any], request: TextRequest, form: str | None
    ) -> TextResult:
        """The TextResult of a /chat/completions ``reply`` (a direct one, or a batch line's)."""
        url = "chat/completions"
        model = request.model or str(self.settings["model"])
        try:
            choice = reply["choices"][0]
            message = choice["message"]
            text = message.get("content") or ""
            refusal = message.get("refusal")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise self.bad_reply(f"POST {url}", "no choices[0].message") from None
        if not isinstance(text, str):
            raise self.bad_reply(f"POST {url}", "message content is not text")
        # prompt_tokens_details.cached_tokens (part of prompt_tokens) is priced at the cache rate
        usage = text_usage(reply.get("usage"), "openai")
        meta: dict[str, Any] = {
            "model": reply.get("model", model),
            "seed": request.seed,
            "finish_reason": choice.get("finish_reason"),
        }
        if isinstance(refusal, str) and refusal:
            meta["refusal"] = refusal
        if form is not None:
            meta["structured_output"] = form
        return TextResult(text=text, metadata=meta, usage=usage)

    def batch_api(self) -> OpenAIBatches:
        """Its /files and /batches endpoints (batch mode: docs/providers.md)."""
        from .openai_batch import OpenAIBatches

        return OpenAIBatches(self)

    # --- structured output ------------------------------------------------------------------

    async def _structured_form(self, client: httpx.AsyncClient) -> str:
        """The form a schema goes out in: the setting, else what this server was found to take."""
        chosen = self.settings.get("structured_output")
        if isinstance(chosen, str):
            return chosen
        if self._form is None:
            host = urlsplit(str(self.base_url)).hostname or ""
            self._form = "json_schema"
            if host != "api.openai.com" and not host.endswith(".azure.com"):
                self._form = await self._form_of_server(client)
        return self._form

    async def _form_of_server(self, client: httpx.AsyncClient) -> str:
        """What GET /models says of the server (one look per provider instance)."""
        try:
            listed = self.json_of(await self.send(client, "GET", "models", params=self.query()))
        except ProviderError:
            return "json_schema"  # no answer there: the first refusal says more
        models = listed.get("data")
        for model in models if isinstance(models, list) else []:
            owner = model.get("owned_by") if isinstance(model, dict) else None
            if isinstance(owner, str) and owner in _OWNER_FORMS:
                return _OWNER_FORMS[owner]
        return "json_schema"

    def _next_form(self, form: str, exc: ProviderError) -> str:
        """The form to try after ``exc`` refused ``form``; re-raises ``exc`` when it was not a
        refusal of the form (or the form was chosen in the settings, or none is left)."""
        refused = (
            exc.status is not None
            and 400 <= exc.status < 600
            and exc.status not in (429, 502, 503, 504)
            and _FORM_REFUSED.search(exc.message) is not None
        )
        if not refused or "structured_output" in self.settings or form == "prompt":
            raise exc
        return STRUCTURED_FORMS[STRUCTURED_FORMS.index(form) + 1]

    @staticmethod
    def _message(message: dict[str, Any]) -> dict[str, Any]:
        images = message.get("images") or []
        if not images:
            return {"role": message["role"], "content": message.get("content", "")}
        parts: list[dict[str, Any]] = [{"type": "text", "text": message.get("content", "")}]
        for data in images:
            url = f"data:{image_type(data)[0]};base64,{b64encode(data)}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        return {"role": message["role"], "content": parts}


def _with_schema(
    body: dict[str, Any], schema: dict[str, Any], strict: Any, form: str
) -> dict[str, Any]:
    """``body`` asking for a reply that meets ``schema``, in the wire form ``form``."""
    out = dict(body)
    if form == "json_schema":
        spec: dict[str, Any] = {"name": "reply", "schema": schema}
        if strict is not None:
            spec["strict"] = bool(strict)
        out["response_format"] = {"type": "json_schema", "json_schema": spec}
    elif form == "json_object_schema":
        out["response_format"] = {"type": "json_object", "schema": schema}
    else:  # the schema told in words; json_object mode holds the reply to JSON at least
        told = SCHEMA_INSTRUCTION + json.dumps(schema, sort_keys=True)
        out["messages"] = [{"role": "system", "content": told}, *body["messages"]]
        if form == "json_object":
            out["response_format"] = {"type": "json_object"}
    return out
