"""Fixtures of the live tier: real servers, started once per session on free loopback ports.

Every test module here is marked ``live`` (the default ``pytest`` run deselects them; `.ci/run` runs
``pytest -m live`` after the unit suite). A server that cannot be set up skips its tests, and
the session ends with one loud line per missing server saying why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .proxy import CountingProxy
from .servers import Server, Unavailable, comfyui_server, litellm_server, llama_server

# name -> why it is missing; printed once at the end of the session.
MISSING: dict[str, str] = {}


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for name, why in MISSING.items():
        terminalreporter.write_line(
            f"LIVE TIER SKIPPED: {name} could not be set up: {why}", red=True, bold=True
        )


def _started(name: str, make: Callable[[Path], Server], work: Path) -> Iterator[Server]:
    if name in MISSING:
        pytest.skip(f"live {name}: {MISSING[name]}")
    try:
        server = make(work)
        server.start()
    except Unavailable as exc:
        MISSING[name] = str(exc)
        pytest.skip(f"live {name}: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def _llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from _started("llama.cpp", llama_server, tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="session")
def _comfyui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from _started("ComfyUI", comfyui_server, tmp_path_factory.mktemp("comfyui"))


@pytest.fixture
def llama(_llama: Server) -> Server:
    """The llama.cpp server, up (restarted if an earlier test left it down)."""
    _llama.ensure()
    return _llama


@pytest.fixture
def comfyui(_comfyui: Server) -> Server:
    """The ComfyUI server, up (restarted if an earlier test left it down)."""
    _comfyui.ensure()
    return _comfyui


@pytest.fixture(scope="session")
def _upstream(_llama: Server) -> Iterator[CountingProxy]:
    """A counting proxy between the gateway and the llama server: what reached the model."""
    with CountingProxy(_llama.port) as p:
        yield p


@pytest.fixture(scope="session")
def _litellm(
    _upstream: CountingProxy, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    def make(work: Path) -> Server:
        return litellm_server(work, _upstream.url)

    yield from _started("LiteLLM", make, tmp_path_factory.mktemp("litellm"))


@pytest.fixture
def gateway(_litellm: Server, llama: Server) -> Server:
    """LiteLLM's proxy in front of the llama server, both up."""
    _litellm.ensure()
    return _litellm


@pytest.fixture
def upstream(_upstream: CountingProxy) -> CountingProxy:
    """The counting proxy between the gateway and the model (counts are cumulative)."""
    return _upstream
