"""runner/providers/_httpx.py: httpx loads without its command-line client and httpcore's trio
backend, works, and leaves both importable afterwards -- each case in a fresh interpreter."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest


def _run(code: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded: dict[str, object] = json.loads(out.stdout)
    return loaded


def test_a_provider_loads_httpx_without_its_cli_or_trio_and_a_request_goes_out() -> None:
    code = """if True:
        import json, sys
        from runner.providers import openai
        import httpx
        httpx.AsyncHTTPTransport()  # what a provider's client makes: httpcore's pool
        left = {name: name in sys.modules for name in ("httpx._main", "trio", "rich", "pygments")}
        transport = httpx.MockTransport(lambda request: httpx.Response(200, json={"ok": 1}))
        with httpx.Client(transport=transport) as client:
            reply = client.get("http://backend.test/v1/models").json()
        print(json.dumps({"left": left, "same": openai.httpx is httpx, "reply": reply}))
    """
    result = _run(code)
    assert result["left"] == {"httpx._main": False, "trio": False, "rich": False, "pygments": False}
    assert result["same"] is True
    assert result["reply"] == {"ok": 1}


@pytest.mark.skipif(importlib.util.find_spec("trio") is None, reason="trio is not installed")
def test_trio_can_still_be_imported_afterwards() -> None:
    code = """if True:
        import json
        import runner.providers._http
        import trio
        print(json.dumps({"trio": hasattr(trio, "run")}))
    """
    assert _run(code) == {"trio": True}


def test_httpx_imported_first_is_used_as_it_is() -> None:
    code = """if True:
        import json, sys
        import httpx
        had_main = "httpx._main" in sys.modules
        from runner.providers._httpx import httpx as ours
        print(json.dumps({"same": ours is httpx, "main": ("httpx._main" in sys.modules) == had_main}))
    """
    assert _run(code) == {"same": True, "main": True}
