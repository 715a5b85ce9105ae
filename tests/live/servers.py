"""The live tier's real servers: each a subprocess on a free loopback port, in its own venv.

The venvs and the ComfyUI copy are made by ``.ci/live-setup`` in ``$RUNNER_LIVE_CACHE`` (default
``~/.cache/runner-live``); a server whose setup is missing or failed raises ``Unavailable`` with
the reason, and the tests skip with it (conftest.py says so once, loudly).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("RUNNER_LIVE_CACHE") or Path.home() / ".cache" / "runner-live")


class Unavailable(Exception):
    """A server of the live tier cannot be had here; the message says why."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def venv_python(name: str) -> Path:
    """The Python of the live venv ``name`` ("llama", "comfyui"), or Unavailable with why."""
    venv = CACHE / f"venv-{name}"
    if (venv / ".ready").is_file() and (venv / "bin" / "python").exists():
        return venv / "bin" / "python"
    failed = CACHE / f"{name}.failed"
    if failed.is_file():
        raise Unavailable(failed.read_text(encoding="utf-8").strip())
    raise Unavailable(f"not set up in {CACHE}: run `bash .ci/live-setup` first")


def http_json(url: str, body: Any = None, timeout: float = 30.0) -> Any:
    """GET (or POST ``body`` as JSON) and the reply's JSON; HTTPError carries error replies."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        text = resp.read()
    return json.loads(text) if text.strip() else None  # ComfyUI's POST /queue answers nothing


class Server:
    """A server process: started, waited for until ``ready_path`` answers, stopped or killed."""

    def __init__(
        self, name: str, argv: list[str], *, port: int, ready_path: str, log: Path,
        cwd: Path | None = None, startup: float = 120.0, env: dict[str, str] | None = None,
    ) -> None:
        self.name, self.argv, self.port, self.ready_path = name, argv, port, ready_path
        self.log, self.cwd, self.startup = log, cwd, startup
        self.extra_env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + self.ready_path, timeout=5):
                return True
        except (OSError, urllib.error.URLError):
            return False

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start the process and wait until it answers; Unavailable (with its log) if not."""
        self.starts += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
        env.update(self.extra_env)
        with self.log.open("ab") as out:
            out.write(f"\n=== start {self.starts}: {' '.join(self.argv)}\n".encode())
            self.proc = subprocess.Popen(
                self.argv, cwd=self.cwd, stdout=out, stderr=subprocess.STDOUT, env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.startup
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise Unavailable(f"{self.name} exited at start: {self.tail()}")
            if self.answers():
                return
            time.sleep(0.2)
        self.stop()
        raise Unavailable(f"{self.name} did not answer in {self.startup:.0f} s: {self.tail()}")

    def tail(self, chars: int = 600) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text[-chars:].splitlines())

    def kill(self) -> None:
        """SIGKILL: the server dies mid-work, as a crash or an OOM kill does."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()

    def ensure(self) -> None:
        """Running and answering (restarted when a test left it down)."""
        if not (self.running and self.answers()):
            self.stop()
            self.start()


def llama_server(work: Path) -> Server:
    """llama-cpp-python's OpenAI-compatible server on a tiny random-weight GGUF it is given."""
    python = venv_python("llama")
    model = work / "tiny-llama.gguf"
    if not model.exists():
        made = subprocess.run(
            [str(python), str(HERE / "make_gguf.py"), str(model)],
            capture_output=True, text=True, timeout=120,
        )
        if made.returncode != 0:
            raise Unavailable(f"writing the tiny GGUF failed: {made.stderr[-600:]}")
    port = free_port()
    argv = [
        str(python), "-m", "llama_cpp.server", "--model", str(model), "--model_alias", "tiny",
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "1",
    ]
    return Server("llama.cpp server", argv, port=port, ready_path="/v1/models",
                  log=work / "llama-server.log", startup=60)


def comfyui_server(work: Path) -> Server:
    """ComfyUI on the CPU, writing only under ``work`` (its output, input, temp, user dirs)."""
    python = venv_python("comfyui")
    src = CACHE / "comfyui"
    if not (src / "main.py").is_file():
        raise Unavailable(f"no ComfyUI copy at {src}: run `bash .ci/live-setup` first")
    dirs = {d: work / d for d in ("output", "input", "temp", "user")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    port = free_port()
    argv = [
        str(python), "main.py", "--cpu", "--listen", "127.0.0.1", "--port", str(port),
        "--disable-auto-launch", "--disable-all-custom-nodes", "--disable-api-nodes",
        "--output-directory", str(dirs["output"]), "--input-directory", str(dirs["input"]),
        "--temp-directory", str(dirs["temp"]), "--user-directory", str(dirs["user"]),
        "--database-url", f"sqlite:///{dirs['user'] / 'comfyui.db'}",
    ]
    return Server("ComfyUI", argv, port=port, ready_path="/queue", cwd=src,
                  log=work / "comfyui.log", startup=180)


LITELLM_KEY = "sk-live-gateway-master"


def litellm_server(work: Path, upstream: str) -> Server:
    """LiteLLM's proxy (PyPI ``litellm[proxy]``, its own venv), no database, a master key set,
    serving the model "tiny" from the OpenAI-compatible server at ``upstream``: the gateway many
    teams put between their code and their models. Offline: its model price map is the one it
    ships, and it retries nothing itself (a 5xx reaches runner as the gateway sends it)."""
    python = venv_python("litellm")
    port = free_port()
    config = work / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        "  - model_name: tiny\n"
        "    litellm_params:\n"
        "      model: openai/tiny\n"
        f"      api_base: {upstream}/v1\n"
        "      api_key: none\n"
        "general_settings:\n"
        f"  master_key: {LITELLM_KEY}\n"
        "litellm_settings:\n"
        "  num_retries: 0\n",
        encoding="utf-8",
    )
    argv = [str(python.parent / "litellm"), "--config", str(config),
            "--host", "127.0.0.1", "--port", str(port)]
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False"}
    return Server("LiteLLM proxy", argv, port=port, ready_path="/health/liveliness",
                  log=work / "litellm.log", startup=90, env=env)
