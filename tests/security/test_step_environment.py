"""What a command a step runs is given of runner's environment (issue 40, section 2).

The team cache's signing key (``[cache] sign_key_env``) was given to every shell step and exec
check, because the step environment was runner's own less the names a list knew as secret; a
step printed it in base64 and it reached the journal and the shared remote, where anyone holding
it could sign forged records. A command now gets the base set (PATH, HOME, LANG, ...), the
variables its own step names in ``pass_env``, and its ``env:``; nothing else.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runner.source.secretenv import BASE_NAMES, command_environment, is_credential_name

SIGN_KEY = "team-signing-key-" + "Q7x2Lm9Rt4Vb8Nc1"

PRINTS_THE_KEY = """\
runner: 1
name: leak
steps:
  show:
    uses: shell
    with:
      run: 'printf %s "$TEAM_SIGN" | base64 > out/b64.txt; env > out/env.txt; echo "[$TEAM_SIGN]"'
      outputs: [out/b64.txt, out/env.txt]
    check:
      - exec: {run: 'test -z "$TEAM_SIGN"'}
  gated:
    uses: shell
    when: {exec: {run: 'test -z "$TEAM_SIGN"'}}
    with: {run: "echo the key was not given"}
"""


def _apply(root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    full.update({"NO_COLOR": "1", **env})
    return subprocess.run(
        [sys.executable, "-m", "runner", "apply", "pipeline.yaml", "--json"],
        cwd=root,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _files_under(*roots: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for r in roots for p in r.rglob("*") if p.is_file()}


def test_the_cache_signing_key_reaches_no_step_nor_the_journal_nor_the_remote(
    tmp_path: Path,
) -> None:
    project, remote = tmp_path / "project", tmp_path / "remote"
    (project / "out").mkdir(parents=True)
    remote.mkdir()
    (project / "pipeline.yaml").write_text(PRINTS_THE_KEY, encoding="utf-8")
    (project / "runner.toml").write_text(
        textwrap.dedent(
            f"""\
            [cache]
            remote = "file://{remote}"
            writable = true
            sign_key_env = "TEAM_SIGN"
            """
        ),
        encoding="utf-8",
    )
    done = _apply(project, {"TEAM_SIGN": SIGN_KEY})
    assert done.returncode == 0, done.stdout + done.stderr
    steps = {s["id"]: s["status"] for s in json.loads(done.stdout)["steps"]}
    assert steps == {"show": "ran", "gated": "ran"}, steps  # the exec check and the when: passed
    assert (project / "out" / "b64.txt").read_bytes() == b""
    assert "TEAM_SIGN" not in (project / "out" / "env.txt").read_text()
    encoded = base64.b64encode(SIGN_KEY.encode())
    pushed = _files_under(remote)
    assert any("/records/" in p for p in pushed), "the apply pushed nothing to look at"
    for where, data in {**_files_under(project / ".runner"), **pushed}.items():
        assert SIGN_KEY.encode() not in data and encoded[:16] not in data, where


STEPS_WITH_PASS_ENV = """\
runner: 1
name: envs
steps:
  asks:
    uses: shell
    with:
      run: "env > out/asks.txt"
      outputs: [out/asks.txt]
      pass_env: [DEPLOY_HOST, GITHUB_PAT]
  plain:
    uses: shell
    with: {run: "env > out/plain.txt", outputs: [out/plain.txt]}
    needs: [asks]
  checked:
    uses: shell
    with: {run: "true"}
    check:
      - exec: {run: 'test -z "$DEPLOY_HOST$GITHUB_PAT$PLAIN_SETTING$MY_KEY$DB_SECRET"'}
      - exec: {run: 'test "$DEPLOY_HOST" = deploy.example', pass_env: [DEPLOY_HOST]}
"""


def test_a_step_gets_the_base_set_and_its_own_pass_env_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "pipeline.yaml").write_text(STEPS_WITH_PASS_ENV, encoding="utf-8")
    given = {
        "DEPLOY_HOST": "deploy.example",  # no credential-like name: given only when passed
        "GITHUB_PAT": "ghp-pat-value-123456",
        "PLAIN_SETTING": "kept-out",
        "MY_KEY": "my-key-value-123456",
        "DB_SECRET": "db-secret-value-1234",
        "LANG": "C.UTF-8",
    }
    done = _apply(tmp_path, given)
    assert done.returncode == 0, done.stdout + done.stderr
    asks = dict(
        line.split("=", 1)
        for line in (tmp_path / "out" / "asks.txt").read_text().splitlines()
        if "=" in line
    )
    plain = dict(
        line.split("=", 1)
        for line in (tmp_path / "out" / "plain.txt").read_text().splitlines()
        if "=" in line
    )
    assert asks["DEPLOY_HOST"] == "deploy.example" and asks["GITHUB_PAT"] == given["GITHUB_PAT"]
    # Passed to `asks`, given to no other step; the rest of runner's environment to none.
    for name in ("DEPLOY_HOST", "GITHUB_PAT", "PLAIN_SETTING", "MY_KEY", "DB_SECRET"):
        assert name not in plain, name
    for name in ("PLAIN_SETTING", "MY_KEY", "DB_SECRET"):
        assert name not in asks, name
    assert plain["LANG"] == "C.UTF-8" and plain["PATH"] == os.environ["PATH"]
    # What a command holds besides the base set is the shell's own (PWD, SHLVL, ...) only.
    extra = set(plain) - set(BASE_NAMES) - {"PWD", "SHLVL", "_", "OLDPWD"}
    assert not extra, extra


def test_a_base_name_a_provider_reads_a_secret_from_is_withheld_unless_passed() -> None:
    base = {"PATH": "/bin", "HOME": "/home/u", "LANG": "C", "UNLISTED": "x"}
    assert command_environment(base=base) == {"PATH": "/bin", "HOME": "/home/u", "LANG": "C"}
    assert "HOME" not in command_environment(base=base, named={"HOME"})
    asked = command_environment(base=base, named={"HOME"}, pass_env=["HOME", "UNLISTED"])
    assert asked["HOME"] == "/home/u" and asked["UNLISTED"] == "x"


@pytest.mark.parametrize(
    ("name", "credential"),
    [
        ("RUNNER_CACHE_KEY", True),
        ("STRIPE_KEY", True),
        ("GITHUB_PAT", True),
        ("DEPLOY_TOKEN", True),
        ("DB_SECRET", True),
        ("SMTP_PASSWORD_FILE", True),
        ("OPENAI_API_KEY", True),
        ("PATH", False),
        ("KEYBOARD_LAYOUT", False),
        ("PATH_INFO", False),
        ("LANG", False),
    ],
)
def test_credential_like_names_are_known_as_such(name: str, credential: bool) -> None:
    """*_KEY, *_TOKEN, *_SECRET, *PASSWORD*, *_PAT: withheld unless passed, masked if set."""
    assert is_credential_name(name) is credential
