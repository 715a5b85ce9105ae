"""The fake provider: deterministic real images and texts, scripted replies, failure markers."""

from __future__ import annotations

import asyncio
import io

import pytest
from PIL import Image

from runner.errors import ProviderError
from runner.providers import ImageRequest, TextRequest, call_with_retries, create
from runner.providers.fake import FakeProvider
from tests.providers.servers import png


def image(
    p: FakeProvider,
    prompt: str,
    seed: int | None,
    size: tuple[int, int] = (320, 200),
    refs: list[bytes] | None = None,
    key: str = "",
) -> bytes:
    req = ImageRequest(
        prompt=prompt, seed=seed, size=size, references=refs or [], idempotency_key=key
    )
    return asyncio.run(p.generate_image(req)).image


def test_same_prompt_and_seed_give_identical_png_bytes() -> None:
    a = image(FakeProvider(), "a lighthouse at dusk", 7)
    b = image(FakeProvider(), "a lighthouse at dusk", 7)
    assert a == b
    with Image.open(io.BytesIO(a)) as img:
        assert img.format == "PNG" and img.size == (320, 200)


def test_seed_prompt_and_size_each_change_the_image() -> None:
    p = FakeProvider()
    base = image(p, "a lighthouse", 1)
    assert image(p, "a lighthouse", 2) != base
    assert image(p, "a lighthouse!", 1) != base
    with Image.open(io.BytesIO(image(p, "a lighthouse", 1, size=(100, 80)))) as img:
        assert img.size == (100, 80)


def test_reference_is_pasted_into_the_top_left_corner() -> None:
    ref = png((10, 220, 30), (40, 40))
    out = image(FakeProvider(), "with reference", 3, size=(400, 200), refs=[ref])
    with Image.open(io.BytesIO(out)) as img:
        rgb = img.convert("RGB")
        assert rgb.getpixel((0, 0)) == (10, 220, 30)
        assert rgb.getpixel((99, 49)) == (10, 220, 30)  # a quarter of 400x200
    plain = image(FakeProvider(), "with reference", 3, size=(400, 200))
    with Image.open(io.BytesIO(plain)) as img:
        assert img.convert("RGB").getpixel((0, 0)) != (10, 220, 30)


def test_fail_permanent_is_not_retried() -> None:
    p = FakeProvider()
    req = ImageRequest(prompt="x [[FAIL_PERMANENT]]", seed=1, size=(32, 32))
    with pytest.raises(ProviderError) as info:
        asyncio.run(
            call_with_retries(lambda: p.generate_image(req), attempts=5, base_delay=0, cap=0)
        )
    assert not info.value.transient
    assert "FAIL_PERMANENT" in info.value.message
    assert p.calls == 1


def test_fail_transient_two_times_then_succeeds_on_the_third_attempt() -> None:
    p = FakeProvider()
    req = ImageRequest(prompt="x [[FAIL_TRANSIENT:2]]", seed=1, size=(32, 32), idempotency_key="k1")
    retries: list[int] = []
    result = asyncio.run(
        call_with_retries(
            lambda: p.generate_image(req),
            attempts=3,
            base_delay=0,
            cap=0,
            on_retry=lambda attempt, exc, delay: retries.append(attempt),
        )
    )
    assert result.image.startswith(b"\x89PNG")
    assert retries == [1, 2] and p.calls == 3


def test_fail_transient_counts_per_idempotency_key() -> None:
    p = FakeProvider()

    def call(key: str) -> ProviderError | None:
        req = ImageRequest(
            prompt="[[FAIL_TRANSIENT:1]]", seed=1, size=(16, 16), idempotency_key=key
        )
        try:
            asyncio.run(p.generate_image(req))
        except ProviderError as exc:
            return exc
        return None

    first = call("a")
    assert first is not None and first.transient
    assert call("a") is None
    assert call("b") is not None  # another key has its own count


def test_text_is_deterministic_and_derived_from_the_prompt() -> None:
    p = FakeProvider()
    req = TextRequest(messages=[{"role": "user", "content": "summarise the harbour report"}])
    a = asyncio.run(p.generate_text(req))
    b = asyncio.run(FakeProvider().generate_text(req))
    assert a.text == b.text and "summarise the harbour report" in a.text
    assert a.usage == {"prompt_tokens": 4, "completion_tokens": len(a.text.split())}
    other = TextRequest(messages=[{"role": "user", "content": "something else"}])
    assert asyncio.run(p.generate_text(other)).text != a.text


def test_script_first_match_wins_and_can_key_on_feedback() -> None:
    p = FakeProvider(
        settings={
            "script": [
                {"match": "Previous attempt failed", "reply": "FIXED"},
                {"match": "(?i)classify", "reply": "WRONG"},
                {"match": "classify", "reply": "never reached"},
            ]
        }
    )

    def ask(text: str) -> str:
        req = TextRequest(messages=[{"role": "user", "content": text}])
        return asyncio.run(p.generate_text(req)).text

    assert ask("Classify this") == "WRONG"
    assert ask("classify this\n\nPrevious attempt failed because:\n- bad") == "FIXED"


def test_json_schema_reply_satisfies_the_schema() -> None:
    import jsonschema

    schema = {
        "type": "object",
        "required": ["label", "score"],
        "properties": {
            "label": {"enum": ["invoice", "letter"]},
            "score": {"type": "number", "minimum": 0.5},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
    }
    req = TextRequest(messages=[{"role": "user", "content": "doc"}], json_schema=schema)
    import json

    value = json.loads(asyncio.run(FakeProvider().generate_text(req)).text)
    jsonschema.validate(value, schema)


def test_settings_shape_capabilities_and_profile() -> None:
    p = create("fake", {"max_concurrency": 2, "supports_seed": False, "delay_ms": 5})
    assert p.capabilities.max_concurrency == 2 and not p.capabilities.supports_seed
    # delay_ms changes timing, not output: it stays out of the profile
    assert p.profile() == create("fake", {"max_concurrency": 2, "supports_seed": False}).profile()
    assert p.profile() != create("fake").profile()
    assert p.profile().startswith("fake@1:") and len(p.profile().split(":")[1]) == 12


def test_seedless_fake_reports_no_seed_and_varies_by_key() -> None:
    p = FakeProvider(settings={"supports_seed": False})
    a = image(p, "same", 1, key="k-one")
    assert image(p, "same", 2, key="k-one") == a  # the seed is ignored
    assert image(p, "same", 1, key="k-two") != a


def test_unknown_setting_is_refused() -> None:
    from runner.providers import ProviderConfigError

    with pytest.raises(ProviderConfigError, match="unknown setting"):
        FakeProvider(settings={"delay": 3})
