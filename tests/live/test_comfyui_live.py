"""Live: the image step against a real ComfyUI on the CPU, with workflows that need no weights.

flows/solid.json is EmptyImage -> SaveImage with the seed as the colour, so each iteration's
pixels are known exactly; blur.json adds a large ImageBlur, a job slow enough to kill runner,
stop the server, interrupt or delete it while it runs. How many prompts ComfyUI got is read from
its own /history.
"""

from __future__ import annotations

import json
import shutil
import signal
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from .kit import Run, runner, start_runner, write
from .servers import Server, http_json

pytestmark = pytest.mark.live

FLOWS = Path(__file__).parent / "flows"
# The prompt names the saved file (SaveImage's filename_prefix): the one text input these
# weightless workflows have.
SIZE = {"seed": "1.inputs.color", "width": "1.inputs.width", "height": "1.inputs.height"}
PROVIDERS: dict[str, tuple[str, dict[str, Any]]] = {
    "solid": ("solid.json", {**SIZE, "prompt": "2.inputs.filename_prefix"}),
    "invert": ("invert.json", {**SIZE, "prompt": "3.inputs.filename_prefix"}),
    "scale": ("scale.json", {"seed": "1.inputs.color", "width": "2.inputs.width",
                             "height": "2.inputs.height", "prompt": "3.inputs.filename_prefix"}),
    "blur": ("blur.json", {**SIZE, "prompt": "3.inputs.filename_prefix"}),
    "reference": ("reference.json", {"reference": ["1.inputs.image"],
                                     "prompt": "3.inputs.filename_prefix"}),
    "bad_value": ("bad_value.json", {**SIZE, "prompt": "3.inputs.filename_prefix"}),
    "runtime_error": ("runtime_error.json", {**SIZE, "prompt": "2.inputs.filename_prefix"}),
    "partly_bad": ("partly_bad.json", {**SIZE, "prompt": "2.inputs.filename_prefix"}),
    # the same two SaveImage nodes, and no output_node: which one is meant is not said
    "two_outputs": ("partly_bad.json", {**SIZE, "prompt": "2.inputs.filename_prefix"}),
}
# A workflow with several image outputs names the one runner keeps (else it is refused).
OUTPUT_NODES = {"partly_bad": "2"}


def project(root: Path, url: str, *, max_concurrency: int = 1, **extra: Any) -> None:
    shutil.copytree(FLOWS, root / "flows", dirs_exist_ok=True)
    sections = []
    for name, (flow, subs) in PROVIDERS.items():
        settings = {
            "type": "comfyui", "base_url": url, "workflow": f"flows/{flow}",
            "poll_interval": 0.1, "timeout": 120, "max_concurrency": max_concurrency,
            "retry_base_delay": 0.05, "retry_max_delay": 0.2, **extra,
        }
        if name in OUTPUT_NODES:
            settings["output_node"] = OUTPUT_NODES[name]
        lines = "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
        table = ", ".join(f"{k} = {json.dumps(v)}" for k, v in subs.items())
        sections.append(f"[providers.{name}]\n{lines}substitutions = {{ {table} }}\n")
    write(root, "runner.toml", '[general]\ndefault_provider = "solid"\n\n' + "\n".join(sections))


def images(root: Path, provider: str, *, n: int = 1, seed: int = 0, size: str | None = "48x32",
           concurrency: int = 1, extra: str = "", prompt: str = "live/image") -> None:
    # size None: the step asks for none (a workflow without width/height substitutions would
    # refuse one: it cannot carry it)
    write(
        root,
        "pipeline.yaml",
        f"""\
runner: 1
name: live-images
steps:
  img:
    uses: image
    with:
      prompt: "{prompt}"
      provider: {provider}
      n: {n}
      seed: {seed}
{f'      size: "{size}"' if size else ""}
      concurrency: {concurrency}
{extra}""",
    )


def history(server: Server) -> dict[str, Any]:
    found: dict[str, Any] = http_json(f"{server.url}/history?max_items=10000")
    return found


def raw(root: Path, run: Run, ordinal: int) -> Image.Image:
    it = next(i for i in run.doc["iterations"] if i["ordinal"] == ordinal)
    digest = it["assets"]["raw"]
    assert digest, it
    with Image.open(root / ".runner" / "objects" / digest[:2] / digest[2:]) as img:
        return img.convert("RGB")


def f32(x: float) -> float:
    """``x`` rounded to float32, as torch and numpy hold ComfyUI's pixels."""
    rounded: float = struct.unpack("f", struct.pack("f", x))[0]
    return rounded


def byte(value: float) -> int:
    """A channel as SaveImage writes it: float32 times 255, truncated to 8 bits."""
    return int(f32(255.0 * f32(value)))


def rgb(colour: int) -> tuple[int, int, int]:
    """EmptyImage's colour (each channel / 255) as saved."""
    r, g, b = (byte(((colour >> s) & 0xFF) / 0xFF) for s in (16, 8, 0))
    return r, g, b


def inverted(channels: tuple[int, int, int]) -> tuple[int, int, int]:
    """ImageInvert (1 - x) of an 8-bit picture LoadImage read (x / 255), as saved."""
    r, g, b = (byte(1.0 - f32(c / 255.0)) for c in channels)
    return r, g, b


def near(found: tuple[int, int, int], want: tuple[int, int, int]) -> bool:
    """Within one level per channel: a blur's kernel sums to 1 only up to float32 rounding."""
    return all(abs(a - b) <= 1 for a, b in zip(found, want, strict=True))


def solid(img: Image.Image) -> tuple[int, int, int]:
    colours = img.getcolors()
    assert colours is not None and len(colours) == 1, colours
    found: tuple[int, int, int] = colours[0][1]
    return found


def wait(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def running(server: Server) -> list[str]:
    queue = http_json(f"{server.url}/queue")
    return [item[1] for item in queue["queue_running"]]


def pending(server: Server) -> list[str]:
    queue = http_json(f"{server.url}/queue")
    return [item[1] for item in queue["queue_pending"]]


def test_exact_pixels_reapply_sends_nothing_and_a_new_size_renders_anew(
    tmp_path: Path, comfyui: Server
) -> None:
    project(tmp_path, comfyui.url, max_concurrency=2)
    base = 0x10A0F0
    images(tmp_path, "solid", n=4, seed=base, concurrency=2)
    before = len(history(comfyui))
    first = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert first.code == 0, first.stderr
    assert len(history(comfyui)) == before + 4
    for k in range(1, 5):  # concurrency 2: every iteration still its own colour, its own size
        img = raw(tmp_path, first, k)
        assert img.size == (48, 32)
        assert solid(img) == rgb(base + k - 1)
    again = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert again.code == 0, again.stderr
    assert len(history(comfyui)) == before + 4  # re-apply: 0 prompts
    images(tmp_path, "solid", n=4, seed=base, size="40x24", concurrency=2)
    resized = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert resized.code == 0, resized.stderr
    assert len(history(comfyui)) == before + 8
    assert raw(tmp_path, resized, 2).size == (40, 24)
    assert solid(raw(tmp_path, resized, 2)) == rgb(base + 1)


def test_invert_scale_and_an_uploaded_reference(tmp_path: Path, comfyui: Server) -> None:
    project(tmp_path, comfyui.url)
    images(tmp_path, "invert", seed=0x203040)
    inv = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert inv.code == 0, inv.stderr
    assert solid(raw(tmp_path, inv, 1)) == inverted((0x20, 0x30, 0x40))
    images(tmp_path, "scale", seed=0x00FF00, size="72x40")
    scaled = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert scaled.code == 0, scaled.stderr
    assert raw(tmp_path, scaled, 1).size == (72, 40)  # ImageScale made it from 8x8
    ref = Image.new("RGB", (20, 10), (0, 0, 0))
    ref.paste((200, 100, 50), (0, 0, 10, 10))
    ref.save(tmp_path / "ref.png")
    images(tmp_path, "reference", size=None, extra="      references: [ref.png]\n")
    loaded = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert loaded.code == 0, loaded.stderr
    out = raw(tmp_path, loaded, 1)
    assert out.size == (20, 10)  # the uploaded picture, inverted by ComfyUI
    assert out.getpixel((2, 2)) == inverted((200, 100, 50))
    assert out.getpixel((15, 5)) == inverted((0, 0, 0)) == (255, 255, 255)


def test_validation_and_runtime_errors_in_comfyuis_words(tmp_path: Path, comfyui: Server) -> None:
    project(tmp_path, comfyui.url)
    images(tmp_path, "bad_value")
    bad = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert bad.code != 0
    error = bad.doc["iterations"][0]["error"]
    assert "Value not in list" in error and "upscale_method: 'sideways' not in" in error, error
    assert "node 2 (ImageScale)" in error, error
    images(tmp_path, "runtime_error", prompt="../../outside/escape")
    broke = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert broke.code != 0
    error = broke.doc["iterations"][0]["error"]
    assert "Saving image outside the output folder is not allowed" in error, error
    assert "node 2 (SaveImage)" in error, error


def test_kill_9_of_runner_mid_job_reattaches_to_the_same_prompt(
    tmp_path: Path, comfyui: Server
) -> None:
    project(tmp_path, comfyui.url)
    images(tmp_path, "blur", seed=0x336699, size="1024x1024")
    known = set(history(comfyui))
    proc = start_runner(tmp_path, "apply", "pipeline.yaml", "--json")
    try:
        wait(lambda: bool(running(comfyui)), "the blur to run")
        [prompt_id] = running(comfyui)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
    again = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert again.code == 0, again.stderr
    assert set(history(comfyui)) - known == {prompt_id}  # the one prompt, never queued twice
    it = again.doc["iterations"][0]
    assert near(solid(raw(tmp_path, again, 1)), rgb(0x336699))
    assert it["status"] == "completed"


def test_a_server_stopped_mid_job_and_restarted(tmp_path: Path, comfyui: Server) -> None:
    project(tmp_path, comfyui.url)
    images(tmp_path, "blur", seed=0x00AA55, size="512x512")
    proc = start_runner(tmp_path, "apply", "pipeline.yaml", "--json")
    try:
        wait(lambda: bool(running(comfyui)), "the blur to run")
        comfyui.kill()
        comfyui.start()  # the same port: the job it had is gone with it
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    done = Run(proc.returncode, out, err)
    assert near(solid(raw(tmp_path, done, 1)), rgb(0x00AA55))


def test_interrupt_and_queue_delete_are_reported_as_such(tmp_path: Path, comfyui: Server) -> None:
    project(tmp_path, comfyui.url, max_concurrency=2)
    images(tmp_path, "blur", n=2, seed=0x102030, size="1024x1024", concurrency=2)
    proc = start_runner(tmp_path, "apply", "pipeline.yaml", "--json")
    try:
        wait(lambda: bool(running(comfyui)) and bool(pending(comfyui)), "one running, one queued")
        [queued] = pending(comfyui)
        http_json(f"{comfyui.url}/queue", {"delete": [queued]})
        http_json(f"{comfyui.url}/interrupt", {})
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    run = Run(proc.returncode, out, err)
    assert run.code != 0
    errors = sorted(str(i["error"]) for i in run.doc["iterations"])
    assert any("interrupted on the server" in e for e in errors), errors
    assert any(f"prompt {queued} was deleted from the queue" in e for e in errors), errors


def test_a_server_down_before_the_apply_is_said_at_once_and_bounded(
    tmp_path: Path, comfyui: Server
) -> None:
    # The prompt never reached ComfyUI: the error says the backend is down, not that a history
    # entry is missing; the console says so while the call waits, and max_wait ends the wait.
    project(tmp_path, comfyui.url, max_wait=3)
    images(tmp_path, "solid", seed=0x445566)
    comfyui.stop()
    began = time.monotonic()
    down = runner(tmp_path, "apply", "pipeline.yaml")
    assert down.code != 0
    assert time.monotonic() - began < 30
    assert f"warning: backend {comfyui.url} (solid) down since " in down.stderr, down.stderr
    assert "probing every 1 s" in down.stderr, down.stderr
    assert "history" not in down.stderr, down.stderr
    assert "no answer within max_wait = 3 s; the call was not sent" in down.stderr, down.stderr
    comfyui.start()
    up = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert up.code == 0, up.stderr
    assert solid(raw(tmp_path, up, 1)) == rgb(0x445566)


def test_node_errors_of_an_accepted_prompt_reach_the_console(
    tmp_path: Path, comfyui: Server
) -> None:
    # ComfyUI runs the output that validated and drops the other: the user reads which, why.
    project(tmp_path, comfyui.url)
    images(tmp_path, "partly_bad", seed=0x0000FF)
    run = runner(tmp_path, "apply", "pipeline.yaml")
    assert run.code == 0, run.stderr
    assert "but will not run: node 3 (ImageScale): Value not in list: upscale_method: " in (
        run.stderr
    ), run.stderr


# -- declared = delivered: what a workflow cannot take is refused before any prompt ------------


@pytest.mark.parametrize(
    ("provider", "extra", "said"),
    [
        ("two_outputs", "", "the workflow has 2 image outputs"),
        ("reference", "      references: [ref.png]\n", "does not carry `size`"),
        ("solid", "      params: {steps: 20}\n", "does not carry `params.steps`"),
    ],
    ids=["several-outputs", "size", "params"],
)
def test_what_a_workflow_cannot_take_is_refused_before_any_prompt(
    tmp_path: Path, comfyui: Server, provider: str, extra: str, said: str
) -> None:
    project(tmp_path, comfyui.url)
    Image.new("RGB", (8, 8), (1, 2, 3)).save(tmp_path / "ref.png")
    images(tmp_path, provider, extra=extra)
    known = set(history(comfyui))
    checked = runner(tmp_path, "check", "pipeline.yaml")
    assert checked.code == 2 and said in checked.stderr, checked.stderr
    applied = runner(tmp_path, "apply", "pipeline.yaml")
    assert applied.code == 2 and said in applied.stderr, applied.stderr
    assert set(history(comfyui)) == known  # nothing was queued, so nothing was paid for


def test_a_prompt_behind_another_clients_job_is_said_while_it_waits(
    tmp_path: Path, comfyui: Server
) -> None:
    project(tmp_path, comfyui.url)
    flow = json.loads((FLOWS / "blur.json").read_text(encoding="utf-8"))
    flow["1"]["inputs"].update(width=1024, height=1024)
    flow["3"]["inputs"]["filename_prefix"] = "live/someone-else"
    http_json(f"{comfyui.url}/prompt", {"prompt": flow, "client_id": "someone-else"})
    images(tmp_path, "solid", seed=0x0A0B0C)
    run = runner(tmp_path, "apply", "pipeline.yaml")
    assert run.code == 0, run.stderr
    assert f"queued, 1 ahead on {comfyui.url}" in run.stderr, run.stderr


def test_a_step_timeout_shorter_than_the_job_reattaches_and_never_queues_it_again(
    tmp_path: Path, comfyui: Server
) -> None:
    project(tmp_path, comfyui.url)
    images(tmp_path, "blur", seed=0x113355, size="1024x1024")
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        path.read_text(encoding="utf-8").replace(
            "    uses: image\n", "    uses: image\n    timeout: 0.3\n    retries: 12\n"
        ),
        encoding="utf-8",
    )
    known = set(history(comfyui))
    run = runner(tmp_path, "apply", "pipeline.yaml", "--json")
    assert run.code == 0, run.stderr
    assert "step's timeout fired after 0.3s" in run.stderr, run.stderr
    assert len(set(history(comfyui)) - known) == 1  # one prompt, re-attached by each retry
    assert near(solid(raw(tmp_path, run, 1)), rgb(0x113355))
