"""Every response the server sends, with the secrets runner knows masked
(runner/source/secretmask.py).

Rows written since masking began hold no secret; this also covers older rows, logs and
anything else a page or the API shows. Text and JSON bodies only: images and archives are the
bytes asked for.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...source import secretmask

_TEXT = (b"text/", b"application/json", b"application/problem+json", b"application/x-ndjson")


class MaskMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not secretmask.active():
            await self.app(scope, receive, send)
            return
        held: Message | None = None  # the start, sent with the first body (its length may change)
        masking = False

        async def masked(message: Message) -> None:
            nonlocal held, masking
            if message["type"] == "http.response.start":
                ctype = dict(message.get("headers", [])).get(b"content-type", b"")
                masking = ctype.startswith(_TEXT)
                if not masking:
                    await send(message)
                elif ctype.startswith(b"text/event-stream"):  # live: headers go out at once
                    headers = [
                        (k, v) for k, v in message.get("headers", []) if k != b"content-length"
                    ]
                    await send({**message, "headers": headers})
                else:
                    held = message
                return
            if message["type"] != "http.response.body" or not masking:
                await send(message)
                return
            body = _mask(message.get("body", b""))
            if held is not None:
                start, held = held, None
                headers = [(k, v) for k, v in start.get("headers", []) if k != b"content-length"]
                if not message.get("more_body", False):
                    headers.append((b"content-length", str(len(body)).encode()))
                await send({**start, "headers": headers})
            await send({**message, "body": body})

        await self.app(scope, receive, masked)


def _mask(body: bytes) -> bytes:
    if not body:
        return body
    text = body.decode("utf-8", "surrogateescape")
    return secretmask.mask(text).encode("utf-8", "surrogateescape")
