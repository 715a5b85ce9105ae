"""The differential oracle's project (tests/engine/test_reuse_oracle.py): its files, and how one state of
it is applied, planned and read back.

A ``Variant`` is everything a user may have edited (params, step arguments, source files,
prompts). ``write_project`` lays a variant out in a directory; two pipelines share it:
``pipeline.yaml`` (image, human gate: always the full path) and ``lite.yaml`` (only steps the
no-op fingerprint answers for). ``Observed`` is what one apply did and produced, read from its
events and the journal, so an incremental apply and a from-scratch apply compare field by field.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from click.testing import CliRunner

PIPELINES = ("pipeline.yaml", "lite.yaml")
NAMES = {"pipeline.yaml": "oracle", "lite.yaml": "oracle-lite"}


def outputs(file: str, topic: str) -> tuple[str, ...]:
    """The output files ``file`` declares for the item ``topic``."""
    return tuple(writers(file, topic))


def writers(file: str, topic: str) -> dict[str, str]:
    """Output file -> the step that declares it."""
    if file == "lite.yaml":
        return {"out/lite.md": "keep"}
    return {f"out/{topic}/draft.md": "write", f"out/{topic}/final.md": "publish"}


# NOTES[4] is NOTES[0]'s size: a rewrite keeping the mtime (cp -p) changes only its bytes
NOTES = ("alpha notes\n", "alpha notes\nbeta\n", "", "gamma ünïcode ✓\n", "alpha NOTES\n")
TEMPLATES = (
    "Write about {{ topic }}.\nNotes: {{ notes }}\n",
    "Write briefly about {{ topic }}.\nNotes: {{ notes }}\n",
    "{# a comment only #}Write about {{ topic }}.\nNotes: {{ notes }}\n",
    # an include by a computed name: what it reads is known once a render read it (issue 44)
    'Write about {{ topic }}.\n{% include "prompts/parts/" ~ topic ~ ".j2" %}\nNotes: {{ notes }}\n',
)
PARTS = ("In a {{ topic }} voice.", "In a warm {{ topic }} voice.")  # parts/<topic>.j2
# a json_schema check's schema_file and an exec check's script (both pass; their bytes differ)
SCHEMAS = (
    '{"type": "object", "required": ["a"]}\n',
    '{"type": "object", "required": ["a"], "description": "v2"}\n',
)
SCRIPTS = ("exit 0\n", "# v2\nexit 0\n")
CARDS = tuple(
    f"""\
title: OracleCard
schema_version: 1
key:
  item_key:
    id: {{type: int, value: "${{{{ item_id }}}}"}}
inputs:
  item_id: {{type: int, required: true}}
  label: {{type: string, required: false}}
patterns:
  close: {{regex: '{word}', ignore_case: true}}
fields:
  main:
    scale:
      type: enum
      allowed: [close, medium]
      rules:
        - when: {{matches: {{value: "${{{{ label }}}}", pattern: close}}}}
          value: close
        - else: medium
"""
    for word in ("cats", "dogs")
)
SHOTS = (("a", "b"), ("a", "b", "c"), ("b", "a"), ("a",))
TOPICS = ("cats", "dogs")


@dataclass(frozen=True)
class Variant:
    """One state of everything a user edits between applies."""

    topic: str = "cats"
    shots: tuple[str, ...] = ("a", "b")
    notes: int = 0  # index into NOTES
    template: int = 0  # index into TEMPLATES
    card: int = 0  # index into CARDS
    llm_seed: int = 1
    image_seed: int = 3
    image_suffix: str = ""
    image_size: str = "32x32"
    image_negative: str = ""
    image_n: int = 1
    shell_prefix: str = ""
    hash_extra: int = 0
    retries: int = 0  # key-neutral: the fastpath's keyed digest answers an edit of it
    comment: int = 0  # layout only: the fastpath's document digest answers an edit of it
    part: int = 0  # index into PARTS (what the computed include reads)
    schema: int = 0  # index into SCHEMAS
    script: int = 0  # index into SCRIPTS
    renamed: bool = False  # the hash and caption steps under other ids (same keys)
    on_edit: str = "restore"  # the pipelines' defaults: on_edit

    def params(self) -> list[str]:
        return ["-p", f"topic={self.topic}", "-p", f"shots={json.dumps(list(self.shots))}"]

    def with_(self, **changes: Any) -> Variant:
        return replace(self, **changes)


def _common_steps(v: Variant) -> str:
    extra = f", extra: {v.hash_extra}" if v.hash_extra else ""
    digest, caption = ("checksum", "captions") if v.renamed else ("digest", "caption")
    return f"""\
  notes:
    uses: read
    with: {{path: data/notes.txt}}
  prompt:
    uses: template
    with:
      template: prompts/p.j2
      vars: {{topic: "${{{{ params.topic }}}}", notes: "${{{{ steps.notes.output.text }}}}"}}
  {digest}:
    uses: hash
    with: {{value: {{topic: "${{{{ params.topic }}}}", shots: "${{{{ params.shots }}}}"{extra}}}}}
  card:
    uses: card
    with: {{spec: cards/oracle.yaml, inputs: {{item_id: 7, label: "${{{{ params.topic }}}}"}}}}
  shot:
    uses: template
    for_each: "${{{{ params.shots }}}}"
    with: {{text: "shot {{{{ s }}}} of {{{{ t }}}}", vars: {{s: "${{{{ item }}}}", t: "${{{{ params.topic }}}}"}}}}
  draft:
    uses: llm
    retries: {v.retries}
    with: {{prompt: "${{{{ steps.prompt.output.text }}}}", seed: {v.llm_seed}}}
    check: ["${{{{ output.text | length > 0 }}}}"]
  {caption}:
    uses: llm
    for_each: "${{{{ steps.shot.output }}}}"
    with: {{prompt: "caption for ${{{{ item.text }}}}", seed: {v.llm_seed}}}
    check: ["${{{{ output.text | length > 0 }}}}"]
  meta:
    uses: template
    with: {{text: '{{"a": 1}}'}}
    check:
      - json_schema: {{value: "${{{{ output.text }}}}", parse: true, schema_file: checks/schema.json}}
      - exec: {{run: "sh checks/ok.sh"}}
"""


def _header(name: str, v: Variant, *, item: bool) -> str:
    comment = "# layout edit\n" * v.comment
    head = f"runner: 1\nname: {name}\n{comment}"
    if v.on_edit != "restore":
        head += f"defaults: {{on_edit: {v.on_edit}}}\n"
    if item:
        head += 'item: "${{ params.topic }}"\n'
    return head + (
        "params:\n"
        "  topic: {type: string, default: cats}\n"
        "  shots: {type: array, default: [a, b]}\n"
        "steps:\n"
    )


def _shell(step: str, out: str, v: Variant, needs: str = "") -> str:
    need = f"    needs: [{needs}]\n" if needs else ""
    return f"""\
  {step}:
    uses: shell
{need}    with:
      run: 'mkdir -p "$(dirname "$OUT")" && printf "{v.shell_prefix}%s\\n" "$DRAFT" > "$OUT"'
      env: {{DRAFT: "${{{{ steps.draft.output.text }}}}", OUT: "{out}"}}
      outputs: ["{out}"]
"""


def pipeline_text(v: Variant) -> str:
    neg = f"\n      negative_prompt: {json.dumps(v.image_negative)}" if v.image_negative else ""
    image = f"""\
  pic:
    uses: image
    with:
      prompt: "${{{{ steps.prompt.output.text }}}}{v.image_suffix}"
      size: "{v.image_size}"
      n: {v.image_n}
      seed: {v.image_seed}{neg}
  review:
    uses: human_gate
    with:
      summary: "publish?"
      show: {{draft: "${{{{ steps.draft.output.text }}}}"}}
      revise: draft
"""
    return (
        _header("oracle", v, item=True)
        + _common_steps(v)
        + image
        + _shell("write", "out/${{ params.topic }}/draft.md", v)
        + _shell("publish", "out/${{ params.topic }}/final.md", v, needs="review")
    )


def lite_text(v: Variant) -> str:
    return (
        _header("oracle-lite", v, item=False) + _common_steps(v) + _shell("keep", "out/lite.md", v)
    )


def write_project(root: Path, v: Variant, *, remote: str | None = None, delay_ms: int = 0) -> None:
    """Lay out ``v`` in ``root``, writing only files whose bytes change (as an editor would)."""
    toml = '[general]\ndefault_provider = "fake"\n'
    if delay_ms:
        toml += f"[providers.fake]\ndelay_ms = {delay_ms}\n"
    if remote:
        toml += f'[cache]\nremote = "{remote}"\nwritable = true\npush = "manual"\n'
    files = {
        "runner.toml": toml,
        "pipeline.yaml": pipeline_text(v),
        "lite.yaml": lite_text(v),
        "data/notes.txt": NOTES[v.notes],
        "prompts/p.j2": TEMPLATES[v.template],
        "cards/oracle.yaml": CARDS[v.card],
        "checks/schema.json": SCHEMAS[v.schema],
        "checks/ok.sh": SCRIPTS[v.script],
        **{f"prompts/parts/{t}.j2": PARTS[v.part] for t in TOPICS},
    }
    for rel, text in files.items():
        path = root / rel
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


# -- running the CLI in-process --------------------------------------------------------------


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@contextmanager
def _cwd(path: Path) -> Iterator[None]:
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def cli(root: Path, *args: str) -> Result:
    from runner.surfaces.cli.app import cli as main

    with _cwd(root):
        res = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return Result(res.exit_code, res.stdout, res.stderr)


# -- what one apply did ------------------------------------------------------------------------

Slot = tuple[str, int | None]  # (step id, for_each element or None)


@dataclass
class Observed:
    """One apply: its exit code, what it did per step element, the keys and outputs."""

    exit_code: int
    run_id: str | None
    actions: dict[Slot, str] = field(default_factory=dict)  # run/cached/restore/ask/skip/failed
    keys: dict[Slot, str | None] = field(default_factory=dict)
    outputs: dict[Slot, Any] = field(default_factory=dict)
    files: dict[str, bytes | None] = field(default_factory=dict)
    stderr: str = ""
    doc: Any = None


def _action(event: dict[str, Any]) -> str | None:
    kind = event["type"]
    if kind == "StepPassed":
        return "run"
    if kind == "StepFailed":
        return "rejected" if event.get("rejected") else "failed"
    if kind == "GateAwaiting":
        return "ask"
    if kind == "StepSkipped":
        if event.get("reason") == "cached (remote)":
            return "remote"
        if event.get("reason") == "cached":
            return "restore" if event.get("restored") else "cached"
        if event.get("reason") == "edited":
            return "edited"
        return "skip"
    return None


def read_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def parse_events(events: list[dict[str, Any]]) -> tuple[dict[Slot, str], dict[Slot, str | None]]:
    """Per step element, the last thing the apply did with it, and the key it did it under."""
    actions: dict[Slot, str] = {}
    keys: dict[Slot, str | None] = {}
    for ev in events:
        if ev.get("step") is None:
            continue
        act = _action(ev)
        if act is None:
            continue
        slot = (ev["step"], ev.get("element"))
        actions[slot] = act
        keys[slot] = ev.get("key")
    return actions, keys


def _strip(value: Any) -> Any:
    """An output without what legitimately differs between histories: whether a call was
    answered by the ledger (``reused``) and a gate's round count."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in ("reused", "round")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def journal(state: Path) -> sqlite3.Connection:
    db = sqlite3.connect(f"file:{state / 'journal.db'}?mode=ro", uri=True)
    db.execute("PRAGMA busy_timeout=5000")
    return db


def output_of(db: sqlite3.Connection, key: str) -> Any:
    row = db.execute(
        "SELECT output FROM executions WHERE key=? AND status='completed' AND output IS NOT NULL"
        " ORDER BY id DESC LIMIT 1",
        (key,),
    ).fetchone()
    return _strip(json.loads(row[0])) if row and row[0] is not None else None


def edit_of(db: sqlite3.Connection, pipeline: str, slot: Slot, key: str | None) -> Any:
    """The active ``runner edit`` a step element used instead of its run: the oracle edits steps
    without `contract:`, whose edits are bound to their key (found by it, wherever the element
    is now)."""
    row = db.execute(
        "SELECT output FROM overrides WHERE pipeline=? AND step_id=? AND contract=?"
        " AND status='active' ORDER BY id DESC LIMIT 1",
        (pipeline, slot[0], key),
    ).fetchone()
    return _strip(json.loads(row[0])) if row else None


def _expand_steps(db: sqlite3.Connection, obs: Observed) -> None:
    """A watch cycle answers a for_each step its change does not reach with one event for the
    whole step: its elements (and their keys) are the run's journaled rows of that step."""
    for slot in [s for s in obs.actions if s[1] is None and obs.keys[s] is None]:
        rows = db.execute(
            "SELECT element, key FROM executions WHERE run_id=? AND step_id=?"
            " AND element >= 0 ORDER BY id",
            (obs.run_id, slot[0]),
        ).fetchall()
        if not rows:
            continue
        action = obs.actions.pop(slot)
        del obs.keys[slot]
        for element, key in rows:
            obs.actions[(slot[0], element)] = action
            obs.keys[(slot[0], element)] = key


def observe(
    root: Path,
    state: Path,
    file: str,
    topic: str,
    exit_code: int,
    events: list[dict[str, Any]],
    *,
    stderr: str = "",
) -> Observed:
    run_id = next((e["run_id"] for e in events if e["type"] == "RunStarted"), None)
    obs = Observed(exit_code, run_id, stderr=stderr)
    obs.actions, obs.keys = parse_events(events)
    if has_journal(state):
        db = journal(state)
        try:
            _expand_steps(db, obs)
            for slot, key in obs.keys.items():
                if obs.actions[slot] == "edited":
                    obs.outputs[slot] = edit_of(db, NAMES[file], slot, key)
                elif key and obs.actions[slot] in ("run", "cached", "restore", "remote"):
                    obs.outputs[slot] = output_of(db, key)
        finally:
            db.close()
    for rel, step in writers(file, topic).items():
        # an output of a step this apply did not complete is whatever an older run left
        if obs.actions.get((step, None)) not in ("run", "cached", "restore", "remote"):
            continue
        path = root / rel
        obs.files[rel] = path.read_bytes() if path.exists() else None
    return obs


def has_journal(state: Path) -> bool:
    """A journal with its tables (an apply killed before its first migration leaves none)."""
    if not (state / "journal.db").exists():
        return False
    db = journal(state)
    try:
        return bool(db.execute("SELECT 1 FROM sqlite_master WHERE name='runs'").fetchone())
    finally:
        db.close()


def active_edits(state: Path) -> set[tuple[str, str, int]]:
    """(pipeline, step, element) of every standing `runner edit` (element -1: the step)."""
    if not has_journal(state):
        return set()
    db = journal(state)
    try:
        sql = "SELECT pipeline, step_id, element FROM overrides WHERE status='active'"
        return {(r[0], r[1], int(r[2])) for r in db.execute(sql)}
    finally:
        db.close()


def known_decisions(state: Path) -> set[str]:
    """Gate keys the journal still answers: a decided row, or an approval's completed gate
    execution (gc deletes a run's decisions with it)."""
    if not has_journal(state):
        return set()
    db = journal(state)
    try:
        rows = db.execute("SELECT key FROM decisions WHERE status='decided'").fetchall()
        rows += db.execute(
            "SELECT key FROM executions WHERE step_id='review' AND status IN ('completed','cached')"
        ).fetchall()
        return {r[0] for r in rows if r[0]}
    finally:
        db.close()


def completed_calls(state: Path) -> set[str]:
    if not has_journal(state):
        return set()
    db = journal(state)
    try:
        return {r[0] for r in db.execute("SELECT key FROM calls WHERE status='completed'")}
    finally:
        db.close()


def completed_keys(state: Path, pipeline: str | None = None) -> set[str]:
    """Step keys with a completed execution (of ``pipeline``: results are looked up by
    pipeline, step and key; the remote cache by key alone)."""
    if not has_journal(state):
        return set()
    db = journal(state)
    sql = "SELECT key FROM executions WHERE status='completed'"
    try:
        if pipeline is None:
            return {r[0] for r in db.execute(sql) if r[0]}
        return {r[0] for r in db.execute(sql + " AND pipeline=?", (pipeline,)) if r[0]}
    finally:
        db.close()


def plan_actions(doc: dict[str, Any]) -> dict[Slot, str]:
    out: dict[Slot, str] = {}
    for step in doc["steps"]:
        if "elements" in step and step["elements"] is not None:
            for el in step["elements"]:
                out[(step["id"], el["index"])] = el["action"]
        else:
            out[(step["id"], None)] = step["action"]
    return out


def copy_sources(src: Path, dst: Path) -> None:
    """The project's sources (no state, no outputs, no remote) in a fresh directory."""
    for rel in ("pipeline.yaml", "lite.yaml", "data", "prompts", "cards", "checks"):
        s = src / rel
        if s.is_dir():
            shutil.copytree(s, dst / rel)
        elif s.exists():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, dst / rel)
    (dst / "runner.toml").write_text('[general]\ndefault_provider = "fake"\n', encoding="utf-8")


def dedent(text: str) -> str:
    return textwrap.dedent(text)
