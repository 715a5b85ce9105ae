"""A provider key echoed back encoded is masked in that encoding too (issue 40, section 2).

A backend refusing a request may quote what it was sent: its ``Authorization: Basic`` header
(base64 of ``user:key``), the key base64-encoded in a JSON field, or a query string holding the
key URL-encoded. Masking only the plain value let those reach the error, the journal and the
terminal. Through a real `runner apply` against a loopback OpenAI-compatible server: no piece of
the encoded key survives anywhere the apply wrote or printed.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from runner.source.redact import Redactor

from ..providers.openai_server import OpenAIServer
from ..providers.servers import Reply
from .test_secrets import LLM, _apply, _config, _everything

# A key with the characters URL encoding changes, and base64 bytes that differ between the
# standard and URL-safe alphabets.
KEY = "sk-live+Zq/9w=Kd~" + "Ab3dEf6hIj9kLm2nOp5qRs8t?>>?"


def _b64(prefix: str) -> Callable[[str], str]:
    return lambda key: base64.b64encode((prefix + key).encode()).decode()


def _urlsafe(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode()


ENCODINGS: dict[str, Callable[[str], str]] = {
    "base64": _b64(""),
    "basic-auth": _b64("someone:"),  # the key starts at another offset of the stream
    "base64-offset-2": _b64("ab"),
    "urlsafe-base64": _urlsafe,
    "url": lambda key: quote(key, safe=""),
    "url-plus": lambda key: quote_plus(key, safe=""),
}


def _pieces(encoded: str, data: bytes) -> list[str]:
    """12-character runs of the encoded key found in ``data`` (the encoded form's two ends
    carry bits of what surrounds the key, so only its inside is looked for)."""
    inner = encoded[4:-4]
    return [inner[i : i + 12] for i in range(len(inner) - 11) if inner[i : i + 12].encode() in data]


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_a_backend_error_echoing_the_key_encoded_is_masked_everywhere(
    tmp_path: Path, name: str
) -> None:
    encoded = ENCODINGS[name](KEY)
    assert KEY not in encoded and len(encoded) > 30
    (tmp_path / "pipeline.yaml").write_text(LLM)
    message = f"credential {encoded} was rejected"
    with OpenAIServer() as server:
        _config(tmp_path, server.url)
        server.queue(
            "POST",
            "/v1/chat/completions",
            Reply(401, {"error": {"message": message, "type": "invalid_request_error"}}),
        )
        done = _apply(tmp_path, "apply", "pipeline.yaml", "--json", env={"LLM_CRED_VAR": KEY})
    assert done.returncode != 0
    assert "was rejected" in done.stderr + done.stdout, done.stderr
    leaks = {where: _pieces(encoded, data) for where, data in _everything(tmp_path, done)}
    assert not {k: v for k, v in leaks.items() if v}, leaks


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_the_redactor_masks_each_encoding_wherever_it_stands(name: str) -> None:
    encoded = ENCODINGS[name](KEY)
    masked = Redactor([KEY], headers=False, pieces=False).redact(f"before {encoded} after")
    assert masked.startswith("before ") and masked.endswith(" after")
    assert not _pieces(encoded, masked.encode()), masked
