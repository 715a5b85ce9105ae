"""What a record from the remote cache must agree with before any of it is used.

A remote is a network input: anyone who can write to it can write any record. The key a record
is filed under only says which step it claims to answer; what the record may contain is decided
here, by what the local compile says that step is:

- the step type and version the local key was made from;
- exactly the output files the step declares for these arguments (no other name is restored:
  not the pipeline, runner.toml or .git/hooks/...);
- an output of the type's shape (the fields its ``output_doc`` names), every object it names
  listed in the record and every listed object named by it;
- inline values that agree with the objects they are copies of (an llm reply's ``text`` is the
  bytes of its ``sha256`` object, a shell step's ``stdout`` the head of its ``stdout_object``,
  its ``files`` the record's files), so a record pointing at another valid object is refused;
- a predictable step (template, hash, read, card) is computed here and must give the same
  output: such a step needs nothing from the remote but agreement.

A refused record is never restored; the step runs. ``problem`` returns why, or None.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...errors import StoreError
from ...pipeline.compiler import CompiledStep
from ...state.canonical import canonical_json
from ...state.objects import ObjectStore
from ...state.remote import RemoteRecord
from .keys import KeyParts

_HEX = frozenset("0123456789abcdef")


async def problem(
    step: CompiledStep,
    parts: KeyParts,
    key: str,
    record: RemoteRecord,
    objects: ObjectStore,
    root: Path,
) -> str | None:
    """Why ``record`` cannot answer ``step`` (whose key is ``key``, made from ``parts``) in the
    pipeline at ``root``, or None. Every object the record lists is already in ``objects``
    (fetched and verified)."""
    try:
        return await _problem(step, parts, key, record, objects, root)
    except RecursionError:  # parsed in a worker thread's fresh stack, walked on a deeper one
        return "its output is nested too deeply"


async def _problem(
    step: CompiledStep,
    parts: KeyParts,
    key: str,
    record: RemoteRecord,
    objects: ObjectStore,
    root: Path,
) -> str | None:
    if record.key != key:
        return "it is filed under another key"
    tag = f"{parts.step_type}@{parts.type_version}"
    if record.step_type != tag:
        return f"it is a {record.step_type!r} result, the step is {tag!r}"
    declared = set(step.type.produces(parts.args))
    extra = sorted(set(record.files) - declared)
    if extra:
        names = ", ".join(repr(name[:80]) for name in extra[:3])
        return f"it names file(s) the step does not declare: {names}"
    missing = sorted(declared - set(record.files))
    if missing:
        return f"it lacks declared output(s): {', '.join(missing[:3])}"
    output = record.output
    if not isinstance(output, dict):
        return "its output is not a mapping"
    allowed = step.type.output_doc
    unknown = sorted(str(k) for k in output if allowed and k not in allowed)
    if unknown:
        return f"its output has field(s) a {parts.step_type} step never gives: {unknown[:3]}"
    named = set(_digests_in(output)) | set(record.files.values())
    unnamed = sorted(set(record.artifacts) - named)
    if unnamed:
        return f"it lists object {unnamed[0][:12]} its output does not name"
    if step.type.predictable:
        return await _recomputed(step, parts, output, objects, root)
    check = _BY_TYPE.get(parts.step_type)
    try:
        return check(output, record, parts, objects) if check is not None else None
    except StoreError as exc:
        return exc.message


def _digests_in(value: Any) -> Iterator[str]:
    """Every string in ``value`` that has the form of an object digest."""
    if isinstance(value, str):
        if len(value) == 64 and _HEX.issuperset(value):
            yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _digests_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from _digests_in(v)


async def _recomputed(
    step: CompiledStep, parts: KeyParts, output: dict[str, Any], objects: ObjectStore, root: Path
) -> str | None:
    from ...steps.base import ResultStatus, StepContext, StepEnv

    env = StepEnv(root=root, state_dir=objects.root.parent, objects=objects)
    ctx = StepContext(env=env, run_id="remote-check", step_id=step.id)
    try:
        mine = await step.type.run(ctx, dict(parts.args))
    except Exception as exc:  # whatever stops it here refuses the record; the step then runs
        return f"the step cannot be computed here to compare: {type(exc).__name__}: {exc}"
    if mine.status is not ResultStatus.OK or canonical_json(mine.output) != canonical_json(output):
        return "its output differs from the step's own (computed here)"
    return None


def _text_of(objects: ObjectStore, digest: Any, record: RemoteRecord) -> bytes:
    if not isinstance(digest, str) or digest not in record.artifacts:
        raise StoreError("its output names an object the record does not list")
    return objects.read_bytes(digest)


def _llm(
    output: dict[str, Any], record: RemoteRecord, _parts: KeyParts, objects: ObjectStore
) -> str | None:
    text = output.get("text")
    if not isinstance(text, str):
        return "its text is not a string"
    if _text_of(objects, output.get("sha256"), record) != text.encode("utf-8"):
        return "its text is not the content of its sha256 object"
    if output.get("json") is not None:
        from ...errors import StepFailure
        from ...steps.llm import parse_json_reply

        try:
            same = canonical_json(parse_json_reply(text)) == canonical_json(output["json"])
        except StepFailure:
            same = False
        if not same:
            return "its json is not its text parsed"
    return None


def _shell(
    output: dict[str, Any], record: RemoteRecord, _parts: KeyParts, objects: ObjectStore
) -> str | None:
    from ...steps.shell import INLINE_LIMIT

    if output.get("exit_code") != 0:
        return "it is a failed command's result"
    if output.get("files") != record.files:
        return "its output files differ from the record's files"
    for name in ("stdout", "stderr"):
        inline = output.get(name)
        if not isinstance(inline, str):
            return f"its {name} is not a string"
        whole = output.get(f"{name}_object")
        if whole is None:
            if len(inline) > INLINE_LIMIT:
                return f"its {name} is longer than a step keeps inline"
            continue
        data = _text_of(objects, whole, record)
        head = data[:INLINE_LIMIT].decode("utf-8", errors="replace")
        if len(data) <= INLINE_LIMIT or head != inline:
            return f"its {name} is not the head of its {name}_object"
    return None


def _image(
    output: dict[str, Any], record: RemoteRecord, _parts: KeyParts, _objects: ObjectStore
) -> str | None:
    iterations = output.get("iterations")
    if not isinstance(iterations, list) or not all(isinstance(i, dict) for i in iterations):
        return "its iterations are not a list of mappings"
    raws = [it.get("raw") for it in iterations if it.get("status") == "completed"]
    if any(not isinstance(r, str) or r not in record.artifacts for r in raws):
        return "a completed iteration names no listed object"
    if output.get("completed") != len(raws) or output.get("failed") != len(iterations) - len(raws):
        return "its completed/failed counts disagree with its iterations"
    return None


def _finalize(
    output: dict[str, Any], record: RemoteRecord, parts: KeyParts, objects: ObjectStore
) -> str | None:
    entries = output.get("iterations")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        return "its iterations are not a list of mappings"
    args = parts.args if isinstance(parts.args, dict) else {}
    if "image" in args:
        inputs = [args["image"]]
    else:
        items = args.get("iterations")
        inputs = [i.get("raw") if isinstance(i, dict) else None for i in items or []]
    if [e.get("raw") for e in entries] != inputs:
        return "its iterations are not the step's input images"
    for e in entries:
        final = e.get("final")
        if final is None:
            continue
        if not isinstance(final, str) or final not in record.artifacts:
            return "a final image names no listed object"
        if e.get("bytes") != objects.size(final):
            return f"final {final[:12]} is not the size its entry gives"
    return None


_BY_TYPE = {"llm": _llm, "shell": _shell, "image": _image, "finalize": _finalize}
