"""The built-in offline provider: deterministic real images and texts, scriptable failures.

Images are drawn with Pillow from (prompt, seed, size): a two-colour gradient, shapes placed by a
seed-derived RNG, the prompt and the seed printed. Same inputs give byte-identical PNGs. A
reference image is pasted, scaled to a quarter, into the top-left corner so tests can see it.

Prompt markers: ``[[FAIL_PERMANENT]]`` fails for good; ``[[FAIL_TRANSIENT:k]]`` fails
transiently k times per idempotency key, then succeeds.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import random
import re
import textwrap
import threading
from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache
from typing import Any, ClassVar

from PIL import Image, ImageDraw, ImageFont

from ..state.canonical import canonical_json
from .base import (
    Capabilities,
    ImageRequest,
    ImageResult,
    Provider,
    ProviderConfigError,
    RetryPolicy,
    TextRequest,
    TextResult,
)

_PERMANENT = "[[FAIL_PERMANENT]]"
_TRANSIENT = re.compile(r"\[\[FAIL_TRANSIENT:(\d+)\]\]")
MAX_SIDE = 4096


def _seeded(*parts: object) -> random.Random:
    h = hashlib.sha256(canonical_json([str(p) for p in parts]).encode()).digest()
    return random.Random(int.from_bytes(h[:8], "big"))


def _colour(rng: random.Random) -> tuple[int, int, int]:
    return (rng.randrange(256), rng.randrange(256), rng.randrange(256))


@lru_cache(maxsize=16)
def _gradient(w: int, h: int, rotated: bool) -> Image.Image:
    """The background's blend mask; shared read-only by every drawing of that size."""
    mask = Image.linear_gradient("L").resize((w, h))
    return mask.transpose(Image.Transpose.ROTATE_90).resize((w, h)) if rotated else mask


_fonts = threading.local()  # a FreeType face is not to be shared between threads


def _font(px: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    cache: dict[int, ImageFont.FreeTypeFont | ImageFont.ImageFont]
    cache = _fonts.__dict__.setdefault("by_size", {})
    if px not in cache:
        cache[px] = ImageFont.load_default(size=px)
    return cache[px]


def draw_image(
    prompt: str, seed: int | str, size: tuple[int, int], references: list[bytes]
) -> bytes:
    """The fake's picture as PNG bytes: a pure function of its arguments."""
    w, h = size
    rng = _seeded(prompt, seed, w, h)
    mask = _gradient(w, h, rng.random() < 0.5)
    img = Image.composite(
        Image.new("RGB", (w, h), _colour(rng)), Image.new("RGB", (w, h), _colour(rng)), mask
    )
    draw = ImageDraw.Draw(img)
    for _ in range(rng.randint(5, 12)):
        x0, y0 = rng.randrange(w), rng.randrange(h)
        x1 = min(w, x0 + rng.randint(w // 20 + 1, w // 3 + 2))
        y1 = min(h, y0 + rng.randint(h // 20 + 1, h // 3 + 2))
        box = (x0, y0, max(x0, x1), max(y0, y1))
        shape = rng.choice(("ellipse", "rectangle", "triangle"))
        fill = _colour(rng)
        if shape == "ellipse":
            draw.ellipse(box, fill=fill)
        elif shape == "rectangle":
            draw.rectangle(box, fill=fill)
        else:
            draw.polygon([(x0, box[3]), (box[2], box[3]), ((x0 + box[2]) // 2, y0)], fill=fill)
    font_px = max(10, min(w, h) // 24)
    font = _font(font_px)
    lines = textwrap.wrap(prompt, width=max(10, int(w / (font_px * 0.6))))[:4]
    lines.append(f"seed {seed}")
    y = h - (len(lines) + 1) * int(font_px * 1.3)
    for line in lines:
        draw.text(
            (font_px, y),
            line,
            fill=(255, 255, 255),
            font=font,
            stroke_width=1,
            stroke_fill=(0, 0, 0),
        )
        y += int(font_px * 1.3)
    tile = (max(1, w // 4), max(1, h // 4))
    for i, ref in enumerate(references[:4]):
        with Image.open(io.BytesIO(ref)) as src:
            img.paste(src.convert("RGB").resize(tile), (i * tile[0], 0))
    out = io.BytesIO()
    img.save(out, format="PNG", compress_level=1)
    return out.getvalue()


def _schema_instance(schema: Any, salt: str) -> Any:
    """A small deterministic value that satisfies common JSON Schemas (for json replies)."""
    if not isinstance(schema, dict):
        return f"fake-{salt[:8]}"
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        choices = schema["enum"]
        return choices[int(salt[:8], 16) % len(choices)]
    for alt in ("anyOf", "oneOf"):
        if schema.get(alt):
            return _schema_instance(schema[alt][0], salt)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")

    def sub(key: object) -> str:
        return hashlib.sha256(f"{salt}/{key}".encode()).hexdigest()

    if kind == "object":
        props = schema.get("properties", {})
        return {k: _schema_instance(v, sub(k)) for k, v in props.items()}
    if kind == "array":
        count = max(1, int(schema.get("minItems", 1)))
        return [_schema_instance(schema.get("items", {}), sub(i)) for i in range(count)]
    if kind in ("integer", "number"):
        low = schema.get("minimum", 0)
        return int(low) if kind == "integer" else float(low)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    text = f"fake-{salt[:8]}"
    return text.ljust(int(schema.get("minLength", 0)), "x")


class FakeProvider(Provider):
    """Offline, deterministic, scriptable; the default provider."""

    key: ClassVar[str] = "fake"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "offline deterministic images (Pillow) and texts, for tests"
    default_capabilities: ClassVar[Capabilities] = Capabilities(
        kinds=frozenset({"image", "text"}),
        supports_seed=True,
        supports_reference_image=True,
        max_concurrency=4,
        accepts_idempotency_key=True,
    )
    known_settings: ClassVar[frozenset[str]] = frozenset(
        {"delay_ms", "supports_seed", "script", "model"}
    )
    defaults: ClassVar[dict[str, Any]] = {"model": "fake-1"}
    default_retry: ClassVar[RetryPolicy] = RetryPolicy(attempts=4, base_delay=0.01, cap=0.1)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._transient_failures: dict[str, int] = {}
        self._script = self._compile_script(self.settings.get("script", []))
        if not isinstance(self.settings.get("supports_seed", True), bool):
            raise ProviderConfigError(f"provider '{self.name}': supports_seed must be true/false")
        self.calls = 0  # how many generate calls reached the provider (tests count them)

    def _compile_script(self, script: Any) -> list[tuple[re.Pattern[str], Any]]:
        if not isinstance(script, list):
            raise ProviderConfigError(f"provider '{self.name}': script must be a list")
        out = []
        for i, entry in enumerate(script):
            if not isinstance(entry, dict) or set(entry) != {"match", "reply"}:
                raise ProviderConfigError(
                    f"provider '{self.name}': script[{i}] must be {{match: regex, reply: ...}}"
                )
            try:
                out.append((re.compile(str(entry["match"]), re.DOTALL), entry["reply"]))
            except re.error as exc:
                raise ProviderConfigError(
                    f"provider '{self.name}': script[{i}].match is not a regex: {exc}"
                ) from None
        return out

    @property
    def capabilities(self) -> Capabilities:
        caps = super().capabilities
        return replace(caps, supports_seed=bool(self.settings.get("supports_seed", True)))

    def profile_settings(self) -> dict[str, Any]:
        return {k: v for k, v in super().profile_settings().items() if k != "delay_ms"}

    async def _enter(self, prompt: str, key: str) -> None:
        """The shared prelude of both calls: delay, then the failure markers."""
        self.calls += 1
        delay = self.float_setting("delay_ms", 0.0) / 1000.0
        if delay:
            await asyncio.sleep(delay)
        if _PERMANENT in prompt:
            raise self.error("permanent failure requested by [[FAIL_PERMANENT]]", transient=False)
        m = _TRANSIENT.search(prompt)
        if m:
            slot = key or hashlib.sha256(prompt.encode()).hexdigest()
            failed = self._transient_failures.get(slot, 0)
            if failed < int(m[1]):
                self._transient_failures[slot] = failed + 1
                raise self.error(
                    f"transient failure {failed + 1} of {m[1]} requested by the prompt",
                    transient=True,
                    status=503,
                )

    def size_refused(
        self, size: tuple[int, int], params: Mapping[str, Any]
    ) -> tuple[str, str] | None:
        if all(1 <= side <= MAX_SIDE for side in size):
            return None
        return f"a side is outside 1..{MAX_SIDE}", f"1x1 to {MAX_SIDE}x{MAX_SIDE}"

    async def generate_image(self, request: ImageRequest) -> ImageResult:
        w, h = request.size
        valid = 1 <= w <= MAX_SIDE and 1 <= h <= MAX_SIDE
        seeded = self.capabilities.supports_seed and request.seed is not None
        # A seedless fake still varies per call, as a seedless backend would, but stays stable.
        seed: int | str = (
            request.seed
            if seeded and request.seed is not None
            else (f"key:{request.idempotency_key[:8]}")
        )
        # Drawn while the delay runs, as a server renders while its client waits: delay_ms is
        # the response time, and the fake's own CPU work does not add to it.
        drawing = (
            asyncio.ensure_future(
                asyncio.to_thread(draw_image, request.prompt, seed, (w, h), request.references)
            )
            if valid
            else None
        )
        try:
            await self._enter(request.prompt, request.idempotency_key)
            if drawing is None:
                raise self.error(f"size {w}x{h} is outside 1..{MAX_SIDE}", transient=False)
            png = await drawing
        except (OSError, ValueError) as exc:
            raise self.error(f"cannot read reference image: {exc}", transient=False) from None
        finally:
            if drawing is not None and not drawing.done():
                drawing.cancel()  # the call failed first: its picture is not wanted
        meta = {
            "seed": request.seed if seeded else None,
            "model": self.settings["model"],
            "revised_prompt": request.prompt,
            "size": f"{w}x{h}",
        }
        return ImageResult(image=png, metadata=meta, usage={"images": 1})

    async def generate_text(self, request: TextRequest) -> TextResult:
        prompt = "\n".join(str(m.get("content", "")) for m in request.messages)
        await self._enter(prompt, request.idempotency_key)
        text = self._reply(prompt, request)
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split())}
        meta = {"model": request.model or self.settings["model"], "seed": request.seed}
        return TextResult(text=text, metadata=meta, usage=usage)

    def _reply(self, prompt: str, request: TextRequest) -> str:
        for pattern, reply in self._script:
            if pattern.search(prompt):
                return reply if isinstance(reply, str) else json.dumps(reply, sort_keys=True)
        salt = hashlib.sha256(f"{prompt}\x00{request.seed}".encode()).hexdigest()
        if request.format == "json" or request.json_schema is not None:
            if request.json_schema is not None:
                return json.dumps(_schema_instance(request.json_schema, salt), sort_keys=True)
            return json.dumps({"reply": f"fake-{salt[:8]}"})
        last = next(
            (
                str(m.get("content", ""))
                for m in reversed(request.messages)
                if m.get("role") == "user"
            ),
            prompt,
        )
        gist = " ".join(last.split())[:160]
        return f"Fake reply {salt[:8]} to: {gist}"


__all__ = ["FakeProvider", "draw_image"]
