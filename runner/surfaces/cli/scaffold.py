"""`runner init`: a minimal working project."""

from __future__ import annotations

from pathlib import Path

PIPELINE = """\
runner: 1
name: hello
description: A first pipeline - render a prompt, then shout it.
params:
  title: {type: string, default: "hello, world"}
steps:
  prompt:
    uses: template
    with:
      template: prompts/hello.j2
      vars: {title: "${{ params.title }}"}
  shout:
    uses: shell
    with:
      run: >-
        mkdir -p out && printf '%s' '${{ steps.prompt.output.sha256 }}' > out/prompt.sha
        && tr a-z A-Z < out/prompt.sha > out/shout.txt
      outputs: [out/prompt.sha, out/shout.txt]
tests:
  default:
    params: {title: "snapshot me"}
"""

CONFIG = """\
# runner.toml marks this directory as the project root: its state is .runner/ here, found from
# any subdirectory (like git). Providers and prices are configured here: see runner's
# docs/providers.md and docs/state.md ("Plan before you pay").
[general]
default_provider = "fake"
"""

PROMPT = """\
Write a one-line greeting for: {{ title }}
"""


def init_project(directory: Path) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    created: list[str] = []
    files = {
        "runner.toml": CONFIG,
        "pipeline.yaml": PIPELINE,
        "prompts/hello.j2": PROMPT,
    }
    for rel, text in files.items():
        path = directory / rel
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        created.append(rel)
    gitignore = directory / ".gitignore"
    lines = gitignore.read_text(encoding="utf-8").splitlines() if gitignore.exists() else []
    # The state, and the folder the web page exports to by default (runner serve).
    missing = [entry for entry in (".runner/", "exports/") if entry not in lines]
    if missing:
        lines.extend(missing)
        gitignore.write_text("\n".join(lines) + "\n", encoding="utf-8")
        created.append(".gitignore")
    return created
