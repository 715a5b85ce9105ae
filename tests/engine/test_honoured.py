"""Declared = delivered: a step asks its provider only for what the provider carries.

`runner check` and `runner apply` refuse, before any call and at the setting's file:line:column,
a setting the provider would drop: a size a ComfyUI workflow has no input for, params on a
ComfyUI step, a negative prompt on OpenAI's images API, `stream` on the OpenAI provider, n
ComfyUI images with no seed to tell them apart, a workflow with several image outputs and no
output_node.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from tests.conftest import Project
from tests.providers.comfy_server import ComfyUIServer
from tests.providers.openai_server import OpenAIServer

DATA = Path(__file__).parent.parent / "data" / "comfyui"
PROMPT_ONLY = 'prompt = "6.inputs.text"\n'
FULL = (
    PROMPT_ONLY + 'seed = "3.inputs.seed"\nwidth = "5.inputs.width"\nheight = "5.inputs.height"\n'
)


def _comfy(project: Project, url: str, subs: str, *, extra: str = "", graph: str = "") -> None:
    shutil.copy(DATA / "sd15_api.json", project.root / "sd15_api.json")
    if graph:
        (project.root / "sd15_api.json").write_text(graph, encoding="utf-8")
    project.write(
        "runner.toml",
        f"""\
        [general]
        default_provider = "comfy"

        [providers.comfy]
        type = "comfyui"
        base_url = "{url}"
        workflow = "sd15_api.json"
        poll_interval = 0.02
        {extra}
        [providers.comfy.substitutions]
        """
        + subs,
    )


def _image_step(with_: str) -> str:
    return "runner: 1\nname: pic\nsteps:\n  gen:\n    uses: image\n    with:\n" + textwrap.indent(
        textwrap.dedent(with_), "      "
    )


def _refused(project: Project) -> dict[str, str]:
    """`runner check --json` and `runner apply --json` both refuse; the check's error."""
    checked = project.cli("check", "pipeline.yaml", "--json")
    assert checked.exit_code == 2, checked.stdout + checked.stderr
    applied = project.cli("apply", "pipeline.yaml", "--json")
    assert applied.exit_code == 2, applied.stdout + applied.stderr
    error: dict[str, str] = json.loads(checked.stdout)["error"]
    return error


def test_a_size_a_comfyui_workflow_has_no_input_for_is_refused_before_any_call(
    project: Project,
) -> None:
    with ComfyUIServer() as server:
        _comfy(project, server.url, PROMPT_ONLY)
        project.write("pipeline.yaml", _image_step("prompt: a lighthouse\nsize: 512x512\n"))
        error = _refused(project)
        assert "provider 'comfy' does not carry `size`" in error["message"]
        assert error["where"].endswith("pipeline.yaml:8:13"), error
        assert "width and height" in error["hint"] and "substitutions" in error["hint"]
        assert server.count("POST", "/prompt") == 0

        # With the substitutions the same step runs.
        _comfy(project, server.url, FULL)
        assert project.cli("check", "pipeline.yaml").exit_code == 0


@pytest.mark.parametrize(
    ("with_", "setting", "line"),
    [
        ("prompt: a lighthouse\nparams: {steps: 30}\n", "params.steps", 8),
        ("prompt: a lighthouse\nnegative_prompt: blurry\n", "negative_prompt", 8),
        ("prompt: a lighthouse\nn: 3\n", None, 8),
    ],
    ids=["params", "negative-prompt", "n-without-seed"],
)
def test_what_a_comfyui_workflow_cannot_take_is_refused(
    project: Project, with_: str, setting: str | None, line: int
) -> None:
    with ComfyUIServer() as server:
        _comfy(project, server.url, PROMPT_ONLY)
        project.write("pipeline.yaml", _image_step(with_))
        error = _refused(project)
        if setting is None:
            assert "takes no seed, so the 3 images would be one request" in error["message"]
        else:
            assert f"does not carry `{setting}`" in error["message"], error
        assert f"pipeline.yaml:{line}:" in error["where"], error
        assert server.count("POST", "/prompt") == 0


def test_several_image_outputs_and_no_output_node_is_refused_naming_them(
    project: Project,
) -> None:
    graph = json.loads((DATA / "sd15_api.json").read_text(encoding="utf-8"))
    graph["10"] = {
        "class_type": "SaveImage",
        "inputs": {"images": ["8", 0], "filename_prefix": "side"},
        "_meta": {"title": "Side output"},
    }
    with ComfyUIServer() as server:
        _comfy(project, server.url, FULL, graph=json.dumps(graph))
        project.write("pipeline.yaml", _image_step("prompt: a lighthouse\nsize: 64x48\n"))
        error = _refused(project)
        assert "2 image outputs" in error["message"], error
        assert "node '10' (Side output)" in error["message"]
        assert "node '9'" in error["message"]
        assert 'output_node = "10"' in error["hint"]
        _comfy(project, server.url, FULL, graph=json.dumps(graph), extra='output_node = "9"\n')
        done = project.apply()
        assert done["_exit"] == 0, done
        assert server.count("POST", "/prompt") == 1


def _openai(project: Project, url: str) -> None:
    project.write(
        "runner.toml",
        f"""\
        [general]
        default_provider = "gw"

        [providers.gw]
        type = "openai"
        base_url = "{url}/v1"
        model = "test-chat"
        image_model = "test-image"
        """,
    )


@pytest.mark.parametrize(
    ("pipeline", "setting"),
    [
        (
            "runner: 1\nname: t\nsteps:\n  ask:\n    uses: llm\n    with:\n"
            "      prompt: hi\n      params: {stream: true}\n"
            '    check: ["${{ output.text | length > 0 }}"]\n',
            "params.stream",
        ),
        (
            "runner: 1\nname: t\nsteps:\n  ask:\n    uses: llm\n    with:\n"
            "      prompt: hi\n      params: {n: 3}\n"
            '    check: ["${{ output.text | length > 0 }}"]\n',
            "params.n",
        ),
        (_image_step("prompt: a lighthouse\nnegative_prompt: fog\n"), "negative_prompt"),
        (_image_step("prompt: a lighthouse\nparams: {n: 2}\n"), "params.n"),
    ],
    ids=["stream", "n-choices", "negative-prompt", "n-images"],
)
def test_what_the_openai_provider_cannot_take_is_refused(
    project: Project, pipeline: str, setting: str
) -> None:
    with OpenAIServer() as server:
        _openai(project, server.url)
        project.write("pipeline.yaml", pipeline)
        error = _refused(project)
        assert f"provider 'gw' does not carry `{setting}`" in error["message"], error
        assert "pipeline.yaml:8:" in error["where"], error
        assert server.requests == []


def test_what_a_provider_carries_runs(project: Project) -> None:
    """Settings the OpenAI provider carries pass the check and reach the wire."""
    with OpenAIServer() as server:
        _openai(project, server.url)
        project.write(
            "pipeline.yaml",
            "runner: 1\nname: t\nsteps:\n  ask:\n    uses: llm\n    with:\n"
            "      prompt: hi\n      temperature: 0.2\n      seed: 7\n"
            "      params: {top_p: 0.5}\n"
            '    check: ["${{ output.text | length > 0 }}"]\n',
        )
        assert project.cli("check", "pipeline.yaml").exit_code == 0
        assert project.apply()["_exit"] == 0
        [body] = [r.json() for r in server.requests]
        assert (body["temperature"], body["seed"], body["top_p"]) == (0.2, 7, 0.5)


def test_an_image_of_another_size_than_asked_fails_and_is_never_paid_for_again(
    project: Project,
) -> None:
    """A service that answers with another size (a model that ignores it) is caught after the
    call: the iteration fails saying so; the paid call is kept, and the next apply finds the
    same image the same size without paying for it again."""
    from tests.providers.servers import Reply, b64, png

    with OpenAIServer() as server:
        _openai(project, server.url)
        project.write("pipeline.yaml", _image_step("prompt: a lighthouse\nsize: 64x48\n"))
        wrong = {"created": 1, "data": [{"b64_json": b64(png(size=(32, 32)))}]}
        server.queue("POST", "/v1/images/generations", Reply(body=wrong))
        first = project.apply()
        assert first["_exit"] != 0
        said = json.dumps(first)
        assert "made a 32x32 image where 64x48 was asked" in said, said
        again = project.apply()
        assert again["_exit"] == first["_exit"]
        assert "made a 32x32 image where 64x48 was asked" in json.dumps(again)
        assert server.count("POST", "/v1/images/generations") == 1


class _OthersJobIsSlow(ComfyUIServer):
    """Another client's job renders in 4 s (it outlasts runner's start), runner's own at once."""

    @property
    def render_s(self) -> float:
        running = self.running
        return 4.0 if running and running[3].get("client_id") == "someone-else" else 0.0

    @render_s.setter
    def render_s(self, _value: float) -> None:
        pass


def test_a_call_queued_behind_another_clients_job_is_said_on_the_plain_console(
    project: Project,
) -> None:
    """Not only in --events: the console says where the call waits while it waits."""
    import subprocess
    import urllib.request

    from tests.conftest import runner_bin

    with _OthersJobIsSlow() as server:
        _comfy(project, server.url, FULL)
        project.write("pipeline.yaml", _image_step("prompt: a lighthouse\nsize: 64x48\n"))
        graph = json.loads((DATA / "sd15_api.json").read_text(encoding="utf-8"))
        graph["6"]["inputs"]["text"] = "another client's picture"
        ask = urllib.request.Request(
            server.url + "/prompt",
            data=json.dumps({"prompt": graph, "client_id": "someone-else"}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(ask, timeout=10) as reply:
            assert reply.status == 200
        done = subprocess.run(
            [*runner_bin(), "apply", "pipeline.yaml"],
            cwd=project.root,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        said = f"waiting gen: image #1: queued, 1 ahead on {server.url}"
        assert said in done.stderr, done.stderr  # progress goes to stderr, the result to stdout
        # Journaled, so the page's live view (the run's event stream) shows it too.
        run_id = done.stdout.split()[1]
        events = project.cli("runs", "events", run_id)
        waits = [json.loads(x) for x in events.stdout.splitlines() if "StepWaiting" in x]
        assert [w["where"] for w in waits] == [f"image #1: queued, 1 ahead on {server.url}"]


def test_a_reference_that_is_not_an_image_is_named_as_the_user_named_it(
    project: Project,
) -> None:
    project.write("notes.png", "meeting notes, not a picture\n")
    project.write("pipeline.yaml", _image_step("prompt: a lighthouse\nreferences: [notes.png]\n"))
    done = project.apply()
    assert done["_exit"] != 0
    said = json.dumps(done)
    assert "reference image 'notes.png' is not a usable image" in said, said
    assert "runner-" not in said


def test_an_http_error_names_the_whole_url_asked(project: Project) -> None:
    """A base_url with the endpoint pasted in asks .../chat/completions/chat/completions: the
    error shows that URL, not a path that looks right."""
    with OpenAIServer() as server:
        _openai(project, server.url + "/v1/chat/completions")
        project.write(
            "pipeline.yaml",
            "runner: 1\nname: t\nsteps:\n  ask:\n    uses: llm\n    with:\n      prompt: hi\n"
            '    check: ["${{ output.text | length > 0 }}"]\n',
        )
        done = project.apply()
        assert done["_exit"] != 0
        asked = f"POST {server.url}/v1/chat/completions/v1/chat/completions -> HTTP 404"
        assert asked in json.dumps(done), done


@pytest.mark.parametrize(
    ("params", "refused"),
    [
        ("{top_p: 0.9}", "params.top_p"),
        ("{options: {top_pp: 0.9}}", "params.options.top_pp"),
        ("{options: {top_p: 0.9}, keep_alive: 5m}", None),
    ],
    ids=["top-level", "misspelt-option", "carried"],
)
def test_what_ollama_would_drop_without_a_word_is_refused(
    project: Project, params: str, refused: str | None
) -> None:
    """Ollama ignores a field it does not know (and an unknown option, with a log line of its
    own): a sampling setting outside `options`, or misspelt in it, is refused."""
    project.write(
        "runner.toml",
        '[general]\ndefault_provider = "local"\n\n[providers.local]\ntype = "ollama"\n'
        'base_url = "http://127.0.0.1:9"\n',
    )
    project.write(
        "pipeline.yaml",
        "runner: 1\nname: t\nsteps:\n  ask:\n    uses: llm\n    with:\n"
        f"      prompt: hi\n      params: {params}\n"
        '    check: ["${{ output.text | length > 0 }}"]\n',
    )
    checked = project.cli("check", "pipeline.yaml", "--json")
    if refused is None:
        assert checked.exit_code == 0, checked.stdout
        return
    assert checked.exit_code == 2, checked.stdout
    error = json.loads(checked.stdout)["error"]
    assert f"does not carry `{refused}`" in error["message"], error
    assert "pipeline.yaml:8:" in error["where"], error


def test_an_a1111_field_its_api_would_drop_is_refused_and_its_own_fields_pass(
    project: Project,
) -> None:
    project.write(
        "runner.toml",
        '[general]\ndefault_provider = "sd"\n\n[providers.sd]\ntype = "a1111"\n'
        'base_url = "http://127.0.0.1:9"\n',
    )
    project.write("pipeline.yaml", _image_step("prompt: a lighthouse\nparams: {stepz: 30}\n"))
    error = _refused(project)
    assert "does not carry `params.stepz`" in error["message"], error
    assert "txt2img/img2img" in error["hint"], error
    project.write(
        "pipeline.yaml",
        _image_step(
            "prompt: a lighthouse\nparams: {steps: 30, cfg_scale: 5, sampler_name: Euler}\n"
        ),
    )
    assert project.cli("check", "pipeline.yaml").exit_code == 0


def test_params_set_for_a_provider_in_runner_toml_are_held_to_what_it_carries(
    project: Project,
) -> None:
    with OpenAIServer() as server:
        _openai(project, server.url)
        with (project.root / "runner.toml").open("a", encoding="utf-8") as f:
            f.write("params = {stream = true}\n")
        project.write(
            "pipeline.yaml",
            "runner: 1\nname: t\nsteps:\n  ask:\n    uses: llm\n    with:\n      prompt: hi\n"
            '    check: ["${{ output.text | length > 0 }}"]\n',
        )
        error = _refused(project)
        assert "`params.stream` set in runner.toml's [providers.gw]" in error["message"], error
        assert server.requests == []


def test_a_waiting_line_holding_hostile_bytes_is_printed_inert() -> None:
    """Where a call waits names a backend (runner.toml) and a step: whatever bytes they hold,
    the console line a terminal reads carries no control sequence and runs nothing."""
    import io

    from runner.engine.run.events import Event, EventType
    from runner.surfaces.cli.console import PlainReporter

    out = io.StringIO()
    hostile = "queued, 1 ahead on http://h\x1b]0;pwned\x07\x1b[31m/'$(id)`id`\"<script>\n-x"
    PlainReporter(out).event(
        Event(EventType.STEP_WAITING, "r1", "gen\x1b[2J", None, {"where": hostile})
    )
    line = out.getvalue()
    assert line.startswith("  waiting gen") and line.count("\n") == 1, repr(line)
    assert "\x1b" not in line and "\x07" not in line, repr(line)
    assert "$(id)" in line and "<script>" in line  # shown as the data it is
