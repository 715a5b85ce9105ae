"""OpenAI (and any OpenAI-compatible server at ``base_url``): images and chat completions.

Images: POST {base}/images/generations (JSON), or POST {base}/images/edits (multipart, image[]
up to 16) when references are given. Text: POST {base}/chat/completions. The idempotency key goes
out as the Idempotency-Key header so a retried request is not billed twice by servers that honour
it. ``base_url`` includes the API version path, as OpenAI's own clients do (".../v1").
"""

from __future__ import annotations

from typing import Any, ClassVar

import httpx

from ._http import HttpProvider, b64decode, b64encode, tls_context, usage_ints
from .base import Capabilities, ImageRequest, ImageResult, TextRequest, TextResult

MAX_REFERENCES = 16


class OpenAIProvider(HttpProvider):
    """OpenAI images + chat completions over HTTP."""

    key: ClassVar[str] = "openai"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "OpenAI or an OpenAI-compatible server (images, chat)"
    default_base_url: ClassVar[str] = "https://api.openai.com/v1"
    default_capabilities: ClassVar[Capabilities] = Capabilities(
        kinds=frozenset({"image", "text"}),
        supports_seed=False,  # the images API takes no seed
        supports_reference_image=True,
        max_concurrency=4,
        accepts_idempotency_key=True,
    )
    known_settings: ClassVar[frozenset[str]] = frozenset(
        {"base_url", "model", "image_model", "api_key_env", "organization", "params"}
    )
    defaults: ClassVar[dict[str, Any]] = {
        "model": "gpt-4o-mini",
        "image_model": "gpt-image-1",
        "api_key_env": "OPENAI_API_KEY",
    }

    def headers(self) -> dict[str, str]:
        h = super().headers()
        key = self.secrets.get("api_key")
        if key:
            h["Authorization"] = f"Bearer {key}"
        org = self.settings.get("organization")
        if isinstance(org, str) and org:
            h["OpenAI-Organization"] = org
        return h

    def _call_headers(self, idempotency_key: str) -> dict[str, str]:
        return {"Idempotency-Key": idempotency_key} if idempotency_key else {}

    def _params(self, request_params: dict[str, Any]) -> dict[str, Any]:
        base = self.settings.get("params", {})
        return {**(base if isinstance(base, dict) else {}), **request_params}

    async def generate_image(self, request: ImageRequest) -> ImageResult:
        model = str(request.params.get("model") or self.settings["image_model"])
        size = f"{request.size[0]}x{request.size[1]}"
        params = {k: v for k, v in self._params(request.params).items() if k != "model"}
        headers = self._call_headers(request.idempotency_key)
        async with self.client(request.timeout) as client:
            if request.references:
                url = "images/edits"
                files = [
                    ("image[]", (f"reference-{i}.png", data, "image/png"))
                    for i, data in enumerate(request.references[:MAX_REFERENCES])
                ]
                form = {"prompt": request.prompt, "model": model, "n": "1", "size": size}
                form.update({k: str(v) for k, v in params.items()})
                resp = await self.send(
                    client,
                    "POST",
                    url,
                    data=form,
                    files=files,
                    headers=headers,
                    tracker=request.tracker,
                )
            else:
                url = "images/generations"
                body = {"model": model, "prompt": request.prompt, "n": 1, "size": size, **params}
                resp = await self.send(
                    client, "POST", url, json=body, headers=headers, tracker=request.tracker
                )
            reply = self.json_of(resp)
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

    async def _download(self, client: httpx.AsyncClient, url: str) -> bytes:
        # A hosted URL is on another origin: fetch it with a client that carries no credentials.
        async with httpx.AsyncClient(
            timeout=client.timeout, trust_env=False, verify=tls_context()
        ) as plain:
            resp = await self.send(plain, "GET", url)
        ctype = resp.headers.get("Content-Type", "")
        if not ctype.startswith("image/"):
            raise self.bad_reply(f"GET {url}", f"content type '{ctype}' is not an image")
        return resp.content

    async def generate_text(self, request: TextRequest) -> TextResult:
        model = request.model or str(self.settings["model"])
        body: dict[str, Any] = {
            "model": model,
            "messages": [self._message(m) for m in request.messages],
            **self._params(request.params),
        }
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.seed is not None:
            body["seed"] = request.seed
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        if request.json_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "reply", "schema": request.json_schema},
            }
        elif request.format == "json":
            body["response_format"] = {"type": "json_object"}
        url = "chat/completions"
        async with self.client(request.timeout) as client:
            resp = await self.send(
                client,
                "POST",
                url,
                json=body,
                headers=self._call_headers(request.idempotency_key),
                tracker=request.tracker,
            )
            reply = self.json_of(resp)
        try:
            message = reply["choices"][0]["message"]
            text = message.get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            raise self.bad_reply(f"POST {url}", "no choices[0].message") from None
        if not isinstance(text, str):
            raise self.bad_reply(f"POST {url}", "message content is not text")
        usage = usage_ints(
            reply.get("usage"),
            {"prompt_tokens": "prompt_tokens", "completion_tokens": "completion_tokens"},
        )
        meta = {
            "model": reply.get("model", model),
            "seed": request.seed,
            "finish_reason": reply["choices"][0].get("finish_reason"),
        }
        return TextResult(text=text, metadata=meta, usage=usage)

    @staticmethod
    def _message(message: dict[str, Any]) -> dict[str, Any]:
        images = message.get("images") or []
        if not images:
            return {"role": message["role"], "content": message.get("content", "")}
        parts: list[dict[str, Any]] = [{"type": "text", "text": message.get("content", "")}]
        for data in images:
            url = f"data:image/png;base64,{b64encode(data)}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        return {"role": message["role"], "content": parts}
