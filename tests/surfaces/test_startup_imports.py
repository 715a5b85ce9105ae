"""Start-up: `runner apply` of a one-step shell pipeline imports only the modules it uses.

87% of a fresh one-step apply was importing (issue 43); each command module, the cost model,
the review's text helpers, the remote cache (only with a remote) and the like are imported where they are
used. A module added to this path must be one the apply uses: add it to APPLY below only then,
or import it where it is needed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PIPELINE = """\
runner: 1
name: one
steps:
  a:
    uses: shell
    with: {run: "echo hi > out.txt", outputs: [out.txt]}
"""

# Every runner module a fresh apply of PIPELINE (with a runner.toml naming no budget) imports.
# (No batch desk: it is made when a step first asks a batch; batchrounds.RunBatches.)
APPLY = frozenset(
    {
        "runner",
        "runner.errors",
        "runner.engine",
        "runner.engine.plan",
        "runner.engine.plan.fastdoc",
        "runner.engine.plan.fastpath",
        "runner.engine.plan.plandoc",
        "runner.engine.run",
        "runner.engine.run.apply",
        "runner.engine.run.attempts",
        "runner.engine.run.batchrounds",
        "runner.engine.run.events",
        "runner.engine.run.execution",
        "runner.engine.run.executor_config",
        "runner.engine.run.executors",
        "runner.engine.run.files",
        "runner.engine.run.foreach",
        "runner.engine.run.interpreter",
        "runner.engine.run.keys",
        "runner.engine.run.locate",
        "runner.engine.run.once",
        "runner.engine.run.options",
        "runner.engine.run.outcomes",
        "runner.engine.run.preflight",
        "runner.engine.run.progress",
        "runner.engine.run.recorded",
        "runner.engine.run.recorder",
        "runner.engine.run.reuse",
        "runner.engine.run.reusedsteps",
        "runner.engine.run.runloop",
        "runner.engine.run.sandboxstart",
        "runner.engine.run.scheduler",
        "runner.engine.run.slots",
        "runner.engine.run.stepbody",
        "runner.expr",
        "runner.expr.alone",  # a command holding a secret runs alone: asked of every command
        "runner.expr.commandscope",  # the step's sandbox setting, set around its checks
        "runner.expr.commandslot",
        "runner.expr.confined",  # a shell step's command runs sandboxed, through the spawner
        "runner.expr.shellenv",  # a shell step renders its command through it (values as env)
        "runner.expr.shellrun",
        "runner.expr.spawnchannel",  # the spawner's one channel: requests out, answers back
        "runner.expr.unquotable",  # (the shell's grammar and scanner load with a first value)
        "runner.expr.values",
        "runner.pipeline",
        "runner.pipeline.compiler",
        "runner.pipeline.labels",
        "runner.pipeline.loader",
        "runner.pipeline.order",
        "runner.pipeline.outputrefs",
        "runner.pipeline.prompt_lock",
        "runner.pipeline.refs",
        "runner.providers",
        "runner.providers.batchapi",
        "runner.providers.limits",
        "runner.providers.pool",
        "runner.source",
        "runner.source._fastschema",
        "runner.source._fastyaml",
        "runner.source.beneath",
        "runner.source.coreschema",
        "runner.source.document",
        "runner.source.globs",
        "runner.source.paths",
        "runner.source.redact",
        "runner.source.regularfile",
        "runner.source.secretenv",
        "runner.source.secretmask",
        "runner.source.secretnames",
        "runner.source.sourced",
        "runner.source.termtext",
        "runner.source.tomlfile",
        "runner.state",
        "runner.state._schema",
        "runner.state.batchbook",
        "runner.state.batching",
        "runner.state.canonical",
        "runner.state.filedigest",
        "runner.state.itemlock",
        "runner.state.journal",
        "runner.state.lease",
        "runner.state.ledger",
        "runner.state.masked",
        "runner.state.migrations",
        "runner.state.objects",
        "runner.state.overrides",
        "runner.state.records",
        "runner.state.repeats",
        "runner.state.wal",
        "runner.steps",
        "runner.steps.base",
        "runner.steps.outputshape",
        "runner.steps.registry",
        "runner.steps.shell",
        "runner.surfaces",
        "runner.surfaces.cli",
        "runner.surfaces.cli.applyrun",  # what apply does, without click
        "runner.surfaces.cli.console",
        "runner.surfaces.cli.entry",
        "runner.surfaces.cli.failures",  # how an error is reported, without click
        "runner.surfaces.cli.quickapply",  # reads a plain `apply` command line before click
        "runner.surfaces.cli.runend",
        "runner.surfaces.cli.termtext",
        "runner.surfaces.counts",  # the summary line counts steps and elements (issue 42)
    }
)

# Packages a shell step never needs: the command-line parser (a plain `apply` command line is
# read by quickapply.py), the TOML reader (runner.toml's plain form: source/tomlfile.py), the
# full YAML reader, the schema validator, templates, HTTP, the terminal's rich display, images,
# the web page, the cluster.
NEVER = (
    "click",
    "tomllib",
    "yaml",
    "jsonschema",
    "referencing",
    "jinja2",
    "httpx",
    "httpcore",
    "rich",
    "PIL",
    "starlette",
    "dask",
    "distributed",
)

PROBE = """
import json, sys
sys.argv = ["runner", "apply", "pipeline.yaml", "-q"]
from runner.surfaces.cli.entry import main
try:
    main()
except SystemExit as exc:
    code = exc.code
with open("modules.json", "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def _applied_modules(root: Path) -> list[str]:
    """The modules `runner apply pipeline.yaml -q` in ``root`` has loaded when it ends (it must
    end well)."""
    res = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=root, capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stderr
    found = json.loads((root / "modules.json").read_text())
    assert found["code"] in (0, None), res.stderr
    return list(found["modules"])


def test_a_one_step_apply_imports_only_what_it_uses(tmp_path: Path) -> None:
    (tmp_path / "pipeline.yaml").write_text(PIPELINE)
    (tmp_path / "runner.toml").write_text("# marks the project root\n")
    modules = _applied_modules(tmp_path)
    assert (tmp_path / "out.txt").read_text() == "hi\n"
    unused = sorted(m for m in modules if m.split(".")[0] == "runner" and m not in APPLY)
    assert unused == [], f"a one-step apply imports modules it does not use: {unused}"
    heavy = sorted({m.split(".")[0] for m in modules} & set(NEVER))
    assert heavy == [], f"a one-step shell apply imports {heavy}"


# In-process steps reading each other's outputs through plain dotted lookups: answered by
# expr/lookup.py without Jinja (~15 ms of a start-up); the list's value is one too.
LOOKUPS = """\
runner: 1
name: lookups
steps:
  src: {uses: read, with: {path: in.txt}}
  a: {uses: hash, with: {value: "${{ steps.src.output.text }}"}}
  b: {uses: hash, with: {value: ["${{ steps.a.output.short }}", "${{ params.n }}"]}}
params:
  n: {type: integer, default: 3}
"""


def test_plain_lookups_import_no_jinja(tmp_path: Path) -> None:
    (tmp_path / "pipeline.yaml").write_text(LOOKUPS)
    (tmp_path / "in.txt").write_text("hi\n")
    (tmp_path / "runner.toml").write_text("# marks the project root\n")
    modules = _applied_modules(tmp_path)
    assert not {"jinja2", "markupsafe", "click"} & set(modules)


# The llm row of issue 43: a for_each of llm calls whose check is a comparison over a filter,
# evaluated by expr/plain.py without Jinja (~12 ms of the process), run without click (~5 ms).
LLM = """\
runner: 1
name: fan
params:
  items: {type: array, default: [a, b, c]}
steps:
  ask:
    uses: llm
    for_each: "${{ params.items }}"
    concurrency: 4
    cache: false
    with: {prompt: "say ${{ item }}"}
    check:
      - "${{ output.text | length > 0 }}"
"""


def test_an_llm_for_each_with_a_plain_check_imports_neither_jinja_nor_click(
    tmp_path: Path,
) -> None:  # (nor tomllib: its runner.toml is of the plain form)
    (tmp_path / "pipeline.yaml").write_text(LLM)
    (tmp_path / "runner.toml").write_text('[general]\ndefault_provider = "fake"\n')
    modules = _applied_modules(tmp_path)
    assert not {"jinja2", "markupsafe", "click", "tomllib"} & set(modules)
    # nor the batch desk and batch API (no `batch: true`), the spend guard (no budget), nor
    # checks its rules do not name
    unused = {
        "runner.engine.run.batchdesk",
        "runner.providers.batchapi",
        "runner.providers.spendguard",
        *(f"runner.expr.checks.{m}" for m in ("choice_in", "exec", "fail", "matches")),
        *(f"runner.expr.checks.{m}" for m in ("collection_has", "file_nonempty", "json_schema")),
    }
    assert not unused & set(modules), sorted(unused & set(modules))
