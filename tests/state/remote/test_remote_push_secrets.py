"""`runner cache push` keeps back what the apply keeps back (issue 40, section 2).

An apply does not push a result that holds a secret; `runner cache push` pushed it anyway, from
the journal, where the output reads masked while the objects it names hold the raw bytes: the
provider key a step printed reached the team's remote. Both now apply one rule
(engine/run/shareable.py): a secret in the output, the report or any object's bytes, plain or
encoded, keeps the result local.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

from tests.conftest import runner_bin

KEY = "sk-proj-" + "Zy9xWv8uTs7rQp6oNm5lKj4i"

PIPELINE = """\
runner: 1
name: keys
steps:
  clean:
    uses: shell
    with: {run: "echo nothing secret here"}
  inline:
    uses: shell
    with:
      run: 'echo "key: $LLM_CRED_VAR"'
      pass_env: [LLM_CRED_VAR]
  long:
    uses: shell
    with:
      run: 'head -c 70000 /dev/zero | tr "\\0" x; echo; printf %s "$LLM_CRED_VAR" | base64'
      pass_env: [LLM_CRED_VAR]
  written:
    uses: shell
    with:
      run: 'printf "token=%s\\n" "$LLM_CRED_VAR" > key.txt'
      outputs: [key.txt]
      pass_env: [LLM_CRED_VAR]
"""


def _project(root: Path, remote: Path, push: str) -> Path:
    root.mkdir(parents=True)
    (root / "p.yaml").write_text(PIPELINE, encoding="utf-8")
    (root / "runner.toml").write_text(
        textwrap.dedent(
            f"""\
            [providers.openai]
            base_url = "http://127.0.0.1:9/v1"
            api_key_env = "LLM_CRED_VAR"

            [cache]
            remote = "file://{remote}"
            writable = true
            push = "{push}"
            """
        ),
        encoding="utf-8",
    )
    return root


def _run(root: Path, *args: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    env.update(NO_COLOR="1", LLM_CRED_VAR=KEY)
    res = subprocess.run(
        [*runner_bin(), *args, "--json"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in res.stderr, res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    doc["_stderr"] = res.stderr
    return doc


def _remote_holds_no_key(remote: Path) -> None:
    encoded = base64.b64encode(KEY.encode())
    for path in remote.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert KEY.encode() not in data and encoded[:20] not in data, path


def _pushed_steps(remote: Path) -> set[str]:
    records = [json.loads(p.read_text()) for p in (remote / "records").rglob("*.json")]
    return {str(r["output"].get("stdout", "")).strip()[:24] for r in records}


def test_cache_push_keeps_back_every_result_the_apply_would(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    remote.mkdir()
    root = _project(tmp_path / "w", remote, push="manual")
    applied = _run(root, "apply", "p.yaml", "-q")
    assert applied["exit_code"] == 0, applied
    assert not (remote / "records").exists()
    pushed = _run(root, "cache", "push")
    assert pushed["exit_code"] == 0, pushed
    assert pushed["pushed"] == 1, pushed  # `clean` only
    skipped = "\n".join(pushed["skipped"])
    assert skipped.count("holds a secret") + skipped.count("held a secret") == 3, skipped
    assert _pushed_steps(remote) == {"nothing secret here"}
    _remote_holds_no_key(remote)


def test_an_apply_keeps_back_a_result_whose_objects_hold_the_key(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    remote.mkdir()
    root = _project(tmp_path / "w", remote, push="apply")
    applied = _run(root, "apply", "p.yaml", "-q")
    assert applied["exit_code"] == 0, applied
    assert applied["remote"]["pushed"] == 1, (applied["remote"], applied["_stderr"])
    assert _pushed_steps(remote) == {"nothing secret here"}
    _remote_holds_no_key(remote)
    # And a later `cache push` does not send what the apply kept back.
    again = _run(root, "cache", "push")
    assert again["pushed"] == 0, again
    _remote_holds_no_key(remote)
