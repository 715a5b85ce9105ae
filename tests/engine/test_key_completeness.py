"""Keys are complete by construction (issue 28, section 1).

For every registered step type, every argument of its schema is either a key part (changing it
changes the step's key and, for a step that pays for calls, the set of its calls' keys) or is
declared in the type's ``key_neutral`` (and then changes neither). An argument nobody
classified fails here: the test walks the schema, not a list of names.

The provider request dataclasses are held to the same rule field by field: a field joins the
call's key unless its metadata says it is not keyed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.providers.base import ImageRequest, TextRequest
from runner.providers.requestkey import keyed_fields, request_key
from runner.steps.base import StepType
from runner.steps.image import ImageStep
from runner.steps.llm import LlmStep
from runner.steps.registry import default_registry
from tests.conftest import REPO, Project
from tests.providers.stepkit import MemoryLedger, make_ctx, make_env

CONFIG = """\
[general]
default_provider = "fake"
[providers.fake]
type = "fake"
[providers.other]
type = "fake"
model = "fake-2"
"""

CARD_INPUTS = {
    "scene_index": 1,
    "shot_index": 1,
    "shot": {"camera_direction": "wide"},
    "visible_entities": [],
    "outlook_pairs": [],
}

# A valid `with:` per step type: the arguments every variant starts from.
BASE: dict[str, dict[str, Any]] = {
    "card": {"spec": "cards/a.yaml", "inputs": CARD_INPUTS},
    "finalize": {"image": "0" * 64, "profile": "square"},
    "hash": {"value": {"a": [1, 2]}},
    "human_gate": {"summary": "ok?"},
    "image": {"prompt": "a lighthouse", "size": "32x32"},
    "ingest": {"collection": "docs", "documents": [{"id": "1", "text": "t"}]},
    "llm": {"prompt": "say hi"},
    "read": {"path": "a.txt"},
    "shell": {"run": "echo hi"},
    "template": {"text": "hello {{ x }}", "vars": {"x": 1}},
    "verify_card": {"spec": "cards/a.yaml", "card": {"card": {}, "hash": "x"}, "inputs": {}},
}

# Two valid values of an argument whose validity depends on the project (files, specs) or
# whose schema the generic values below cannot satisfy.
PAIRS: dict[tuple[str, str], tuple[Any, Any]] = {
    ("card", "spec"): ("cards/a.yaml", "cards/b.yaml"),
    ("verify_card", "spec"): ("cards/a.yaml", "cards/b.yaml"),
    ("read", "path"): ("a.txt", "b.txt"),
    ("read", "as"): ("text", "paths"),
    ("template", "template"): ("t1.j2", "t2.j2"),
    ("template", "text"): ("one {{ x }}", "two {{ x }}"),
    ("finalize", "profile"): ("square", "youtube"),
    ("finalize", "iterations"): ([], [{"ordinal": 1, "raw": None, "status": "failed"}]),
    ("finalize", "image"): ("0" * 64, "1" * 64),
    ("image", "size"): ("32x32", "48x32"),
    ("image", "references"): (["ref1.png"], ["ref2.png"]),
    ("image", "provider"): ("fake", "other"),
    ("llm", "provider"): ("fake", "other"),
    ("llm", "messages"): (
        [{"role": "user", "content": "one"}],
        [{"role": "user", "content": "two"}],
    ),
    ("llm", "format"): ("text", "json"),
    ("llm", "schema"): ({"type": "object"}, {"type": "object", "required": []}),
    ("shell", "pass_env"): (["HOME"], ["LANG"]),
    ("shell", "inputs"): (["a.txt"], ["b.txt"]),
    ("shell", "outputs"): (["o1.txt"], ["o2.txt"]),
    ("shell", "run"): ("echo one > o1.txt > o2.txt", "echo two > o1.txt > o2.txt"),
    ("human_gate", "revise"): ("a", "b"),
    ("template", "vars"): ({"x": 1}, {"x": 2}),
    ("ingest", "documents"): ([{"id": "1", "text": "t"}], [{"id": "1", "text": "u"}]),
}

# What a step of the type needs beside `with:` to compile.
STEP_EXTRA: dict[str, dict[str, Any]] = {"llm": {"check": ["${{ steps.s.output.text != '' }}"]}}

# Arguments that exclude one another: the base leaves these out when the first is varied.
EXCLUSIVE: dict[tuple[str, str], tuple[str, ...]] = {
    ("finalize", "iterations"): ("image",),
    ("template", "template"): ("text",),
    ("llm", "messages"): ("prompt",),
}


def base_for(step: str, arg: str) -> dict[str, Any]:
    drop = EXCLUSIVE.get((step, arg), ())
    return {k: v for k, v in BASE[step].items() if k not in drop}


def generic_pair(schema: dict[str, Any]) -> tuple[Any, Any] | None:
    """Two distinct values valid for a plain argument schema, or None when there is no plain
    answer (the argument must then be in PAIRS)."""
    if "enum" in schema:
        values = list(schema["enum"])
        return (values[0], values[1]) if len(values) > 1 else None
    kinds = schema.get("type")
    kind = next((k for k in kinds if k != "null"), None) if isinstance(kinds, list) else kinds
    low = int(schema.get("minimum", 0))
    high = int(schema.get("maximum", low + 2))
    return {
        "string": ("a", "b"),
        "integer": (low, min(low + 1, high)),
        "number": (0.25, 0.75),
        "boolean": (False, True),
        "object": ({"k": "a"}, {"k": "b"}),
        "array": (["a"], ["b"]),
        None: ("a", "b") if not schema.get("oneOf") and not schema.get("anyOf") else None,
    }.get(kind)


def arguments() -> list[tuple[str, str]]:
    registry = default_registry()
    return [
        (name, arg)
        for name in registry.names()
        for arg in (registry.get(name).schema.get("properties") or {})  # type: ignore[union-attr]
    ]


def pair_of(step: str, arg: str, step_type: StepType) -> tuple[Any, Any]:
    pair = PAIRS.get((step, arg)) or generic_pair(step_type.schema["properties"][arg])
    assert pair is not None and pair[0] != pair[1], (
        f"argument {step}.{arg} is classified nowhere: give it two valid values in PAIRS (a key "
        "part) or declare it in the step type's key_neutral"
    )
    return pair


@pytest.fixture(scope="module")
def keyed_project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    project = Project(tmp_path_factory.mktemp("keys"))
    project.write("runner.toml", CONFIG)
    spec = (REPO / "cards" / "render_prompt_card.yaml").read_text(encoding="utf-8")
    project.write("cards/a.yaml", spec)
    project.write("cards/b.yaml", spec.replace("Per selected shot", "For each selected shot"))
    for rel, text in {"a.txt": "a", "b.txt": "b", "t1.j2": "{{ x }}", "t2.j2": "[{{ x }}]"}.items():
        project.write(rel, text)
    for rel, colour in {"ref1.png": "red", "ref2.png": "blue"}.items():
        from PIL import Image

        Image.new("RGB", (8, 8), colour).save(project.root / rel)
    return project


def step_key(project: Project, step: str, args: dict[str, Any]) -> str:
    """The step's key as the planner computes it (compile, resolve, key), through the CLI."""
    import json

    body = {"uses": step, "with": args, **STEP_EXTRA.get(step, {})}
    pipeline = {"runner": 1, "name": "k", "steps": {"s": body}}
    project.write("p.yaml", json.dumps(pipeline))
    res = project.cli("plan", "p.yaml", "--json")
    doc = res.json
    assert res.exit_code == 0, (step, args, res.stdout, res.stderr)
    (only,) = [s for s in doc["steps"] if s["id"] == "s"]
    assert only["key"], only
    return str(only["key"])


@pytest.mark.parametrize(("step", "arg"), arguments())
def test_every_argument_is_a_key_part_or_declared_key_neutral(
    keyed_project: Project, step: str, arg: str
) -> None:
    step_type = default_registry().get(step)
    assert step_type is not None
    a, b = pair_of(step, arg, step_type)
    base = base_for(step, arg)
    key_a = step_key(keyed_project, step, {**base, arg: a})
    key_b = step_key(keyed_project, step, {**base, arg: b})
    if arg in step_type.key_neutral:
        assert key_a == key_b, f"{step}.{arg} is declared key-neutral but changes the key"
    else:
        assert key_a != key_b, f"{step}.{arg} changes the result but not the step's key"


PAID: dict[str, Callable[[], StepType]] = {"image": ImageStep, "llm": LlmStep}


def call_keys(root: Path, step: str, args: dict[str, Any]) -> set[str]:
    """The keys of the calls the step body makes with ``args`` (on the fake provider)."""
    env = make_env(root, CONFIG)
    ledger = MemoryLedger()
    body = PAID[step]()
    asyncio.run(body.run(make_ctx(env, ledger), dict(args)))
    return set(ledger.entries)


@pytest.mark.parametrize(("step", "arg"), [(s, a) for s, a in arguments() if s in PAID])
def test_every_argument_of_a_paid_step_is_part_of_its_calls_keys(
    keyed_project: Project, tmp_path: Path, step: str, arg: str
) -> None:
    for rel in ("ref1.png", "ref2.png"):
        shutil.copy(keyed_project.root / rel, tmp_path / rel)
    step_type = PAID[step]()
    a, b = pair_of(step, arg, step_type)
    base = base_for(step, arg)
    keys_a = call_keys(tmp_path, step, {**base, arg: a})
    keys_b = call_keys(tmp_path, step, {**base, arg: b})
    if arg in step_type.key_neutral:
        assert keys_a == keys_b, f"{step}.{arg} is declared key-neutral but changes a call key"
    else:
        assert keys_a != keys_b, f"{step}.{arg} changes the request but not its call's key"


def test_every_registered_step_type_has_a_base() -> None:
    assert set(default_registry().names()) <= set(BASE), "give the new step type a BASE"


@pytest.mark.parametrize("request_type", [ImageRequest, TextRequest])
def test_every_keyed_request_field_changes_the_call_key(request_type: type) -> None:
    """Each field not declared as how-the-call-is-made changes the key; the others do not."""
    samples: dict[str, tuple[Any, Any]] = {
        "prompt": ("a", "b"),
        "negative_prompt": ("", "blur"),
        "size": ((32, 32), (48, 32)),
        "seed": (1, 2),
        "references": ([b"one"], [b"two"]),
        "params": ({}, {"steps": 4}),
        "messages": ([{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]),
        "model": ("m1", "m2"),
        "temperature": (0.1, 0.2),
        "format": (None, "json"),
        "json_schema": (None, {"type": "object"}),
        "max_tokens": (10, 20),
        "idempotency_key": ("k1", "k2"),
        "timeout": (1.0, 2.0),
        "job": (None, object()),
        "tracker": (None, object()),
    }
    base = {"prompt": "p"} if request_type is ImageRequest else {"messages": []}
    keyed = set(keyed_fields(request_type))
    for f in dataclasses.fields(request_type):
        assert f.name in samples, f"request field {f.name} is classified nowhere"
        a, b = samples[f.name]
        key_a = request_key(request_type(**{**base, f.name: a}), "fake@1:x")
        key_b = request_key(request_type(**{**base, f.name: b}), "fake@1:x")
        assert (key_a != key_b) == (f.name in keyed), f.name
    assert {"idempotency_key", "timeout", "tracker"} <= {
        f.name for f in dataclasses.fields(request_type)
    } - keyed


def test_a_reference_counts_by_content_not_by_name(tmp_path: Path) -> None:
    from PIL import Image

    Image.new("RGB", (8, 8), "red").save(tmp_path / "ref.png")
    args = {"prompt": "p", "size": "32x32", "references": ["ref.png"]}
    before = call_keys(tmp_path, "image", args)
    Image.new("RGB", (8, 8), "green").save(tmp_path / "ref.png")
    assert call_keys(tmp_path, "image", args) != before


@pytest.mark.parametrize(
    ("step", "args"),
    [
        ("image", {"prompt": "p", "size": "32x32", "references": ["swap.png"]}),
        ("llm", {"messages": [{"role": "user", "content": "what?", "images": ["swap.png"]}]}),
    ],
)
def test_a_reference_image_swapped_under_its_name_changes_the_step_key(
    keyed_project: Project, step: str, args: dict[str, Any]
) -> None:
    """A reference given as a workspace path is read by content: the step runs again when the
    file changes (it was answered from the cache with the image made from the old file)."""
    from PIL import Image

    Image.new("RGB", (8, 8), "red").save(keyed_project.root / "swap.png")
    before = step_key(keyed_project, step, args)
    Image.new("RGB", (8, 8), "blue").save(keyed_project.root / "swap.png")
    assert step_key(keyed_project, step, args) != before


CHECKED = """\
runner: 1
name: checked
patterns:
  word: "^[a-z]+$"
steps:
  s:
    uses: shell
    with: {run: "echo hello"}
    check:
      - "${{ steps.s.output.stdout | length > LIMIT }}"
      - matches: {value: "${{ steps.s.output.stdout | trim }}", pattern_name: word}
"""


def test_a_changed_check_runs_its_step_again(project: Project) -> None:
    """A result that passed other checks is not what running the step now gives: the checks
    (and the named patterns they use) are part of the key."""
    project.write("pipeline.yaml", CHECKED.replace("LIMIT", "0"))
    assert project.apply()["_exit"] == 0
    project.write("pipeline.yaml", CHECKED.replace("LIMIT", "100"))
    plan = project.cli("plan", "pipeline.yaml", "--json").json
    assert plan["steps"][0]["action"] == "run"
    assert any("checks changed" in r for r in plan["steps"][0]["reasons"]), plan
    failed = project.apply()
    # as a fresh run: the output fails the new check
    assert failed["_exit"] != 0 and failed["run"]["status"] == "failed"
    project.write("pipeline.yaml", CHECKED.replace("LIMIT", "0"))
    assert project.apply()["_exit"] == 0
    project.write("pipeline.yaml", CHECKED.replace("LIMIT", "0").replace("a-z", "0-9"))
    again = project.apply()  # the named pattern changed under the same name
    assert again["_exit"] != 0 and again["run"]["status"] == "failed"
