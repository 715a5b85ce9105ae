"""A tampered remote cache is not a way in (issue 33, item 1), over file:// and moto's S3.

One clone pushes honest results; the records are then edited in the remote as an attacker with
write access to it would (every object hashed correctly), and a second, read-only clone applies.
Each tampered record is refused (counted in --json, said in one line), nothing of it is
restored, and its step runs here instead. With a team key, unsigned and mis-signed records are
refused the same way, and signed ones are used.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import runner_bin
from tests.state.remote.s3server import S3Server

PIPELINE = """\
runner: 1
name: tamper
steps:
  make:
    uses: shell
    with:
      run: "printf made > out.txt && echo made"
      outputs: [out.txt]
  ask:
    uses: llm
    with: {prompt: "say hello"}
    check: ["${{ output.text | length > 0 }}"]
  other:
    uses: llm
    with: {prompt: "say goodbye"}
    check: ["${{ output.text | length > 0 }}"]
  prompt:
    uses: template
    with: {text: "hello ${{ steps.ask.output.text }}"}
  show:
    uses: shell
    with:
      run: "cat out.txt"
      inputs: [out.txt]
"""

KEY_VAR = "RUNNER_TEST_CACHE_KEY"


class Remote:
    """The remote's files, read and written behind runner's back."""

    def __init__(
        self,
        url: str,
        env: dict[str, str],
        list_: Callable[[str], list[str]],
        get: Callable[[str], bytes],
        put: Callable[[str, bytes], None],
    ) -> None:
        self.url, self.env = url, env
        self._list, self.get, self.put = list_, get, put

    def records(self) -> dict[str, dict[str, Any]]:
        return {p: json.loads(self.get(p)) for p in self._list("records/") if p.endswith(".json")}

    def record_of(self, step_type: str, pick: Callable[[dict[str, Any]], bool]) -> str:
        found = [p for p, r in self.records().items() if r["step_type"] == step_type and pick(r)]
        assert len(found) == 1, found
        return found[0]

    def put_object(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        self.put(f"objects/{digest[:2]}/{digest[2:]}", data)
        return digest

    def edit(self, path: str, change: Callable[[dict[str, Any]], None]) -> None:
        doc = json.loads(self.get(path))
        change(doc)
        self.put(path, json.dumps(doc).encode())


@pytest.fixture(params=["file", "s3"])
def remote(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Remote]:
    if request.param == "file":
        base = tmp_path / "remote"
        base.mkdir()

        def put(rel: str, data: bytes) -> None:
            (base / rel).parent.mkdir(parents=True, exist_ok=True)
            (base / rel).write_bytes(data)

        yield Remote(
            f"file://{base}",
            {},
            lambda pre: [str(p.relative_to(base)) for p in (base / pre).rglob("*") if p.is_file()],
            lambda rel: (base / rel).read_bytes(),
            put,
        )
        return
    s3: S3Server = request.getfixturevalue("s3")
    bucket = s3.new_bucket()
    yield Remote(
        f"s3://{bucket}/team",
        s3.env(),
        lambda pre: [k.removeprefix("team/") for k in s3.objects(bucket, f"team/{pre}")],
        lambda rel: s3.get(bucket, f"team/{rel}"),
        lambda rel, data: s3.put(bucket, f"team/{rel}", data),
    )


def _clone(
    root: Path, remote: Remote, *, writable: bool, signed: bool = False, push: str = "apply"
) -> Path:
    root.mkdir(parents=True)
    (root / "p.yaml").write_text(PIPELINE, encoding="utf-8")
    sign = f'sign_key_env = "{KEY_VAR}"\npush = "{push}"\n' if signed else ""
    (root / "runner.toml").write_text(
        f'[cache]\nremote = "{remote.url}"\nwritable = {str(writable).lower()}\n{sign}',
        encoding="utf-8",
    )
    return root


def _apply(root: Path, remote: Remote, *args: str, **env: str) -> dict[str, Any]:
    full = {k: v for k, v in os.environ.items() if k not in ("RUNNER_STATE", KEY_VAR)}
    full.update(remote.env, NO_COLOR="1", **env)
    res = subprocess.run(
        [*runner_bin(), *(args or ("apply", "p.yaml", "-q")), "--json"],
        cwd=root,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in res.stderr, res.stderr
    doc: dict[str, Any] = json.loads(res.stdout)
    doc["_stderr"] = res.stderr
    return doc


def _statuses(doc: dict[str, Any]) -> dict[str, str]:
    return {s["id"]: s["status"] for s in doc["steps"]}


def _refusals(doc: dict[str, Any]) -> list[str]:
    return [line for line in doc["_stderr"].splitlines() if "refused" in line]


def _apply_here(root: Path, remote: Remote, **env: str) -> dict[str, Any]:
    """An apply in this process: for the honest clone's set-up (what is tested, the second
    clone's apply, runs as `runner` in its own process)."""
    from click.testing import CliRunner

    from runner.surfaces.cli.app import cli

    unset: dict[str, str | None] = {"RUNNER_STATE": None, KEY_VAR: None}
    old = Path.cwd()
    os.chdir(root)
    try:
        res = CliRunner().invoke(
            cli,
            ["apply", "p.yaml", "-q", "--json"],
            env={**unset, **remote.env, "NO_COLOR": "1", **env},
            catch_exceptions=False,
        )
    finally:
        os.chdir(old)
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def _honest(tmp_path: Path, remote: Remote, **env: str) -> None:
    a = _clone(tmp_path / "a", remote, writable=True, signed=bool(env))
    doc = _apply_here(a, remote, **env)
    assert doc["exit_code"] == 0, doc
    assert doc["remote"]["pushed"] == 5, doc["remote"]


def test_extra_file_names_in_a_record_are_refused_never_written(
    tmp_path: Path, remote: Remote
) -> None:
    _honest(tmp_path, remote)
    poison = remote.put_object(b"steps: {}\n# poisoned\n")
    make = remote.record_of("shell@1", lambda r: "out.txt" in r["files"])
    names = ("p.yaml", "runner.toml", ".git/hooks/post-checkout")

    def add_files(doc: dict[str, Any]) -> None:
        doc["artifacts"][poison] = len(b"steps: {}\n# poisoned\n")
        for name in names:
            doc["files"][name] = poison
            doc["output"]["files"][name] = poison

    remote.edit(make, add_files)
    b = _clone(tmp_path / "b", remote, writable=False)
    before = {n: (b / n).read_bytes() for n in ("p.yaml", "runner.toml")}
    doc = _apply(b, remote)
    assert doc["exit_code"] == 0, doc
    assert {n: (b / n).read_bytes() for n in before} == before
    assert not (b / ".git").exists()
    assert _statuses(doc)["make"] == "ran" and (b / "out.txt").read_text() == "made"
    assert _statuses(doc)["ask"] == "cached"  # honest records are still used
    assert doc["remote"]["refused"] == 1
    refusals = _refusals(doc)
    assert len(refusals) == 1 and "does not declare" in refusals[0], doc["_stderr"]


def test_a_file_name_out_of_the_project_is_refused_and_counted(
    tmp_path: Path, remote: Remote
) -> None:
    _honest(tmp_path, remote)
    poison = remote.put_object(b"escaped")
    make = remote.record_of("shell@1", lambda r: "out.txt" in r["files"])

    def escape(doc: dict[str, Any]) -> None:
        doc["artifacts"][poison] = 7
        doc["files"]["../escape"] = poison

    remote.edit(make, escape)
    b = _clone(tmp_path / "b", remote, writable=False)
    doc = _apply(b, remote)
    assert not (tmp_path / "escape").exists()
    assert _statuses(doc)["make"] == "ran"
    assert doc["remote"]["refused"] == 1 and len(_refusals(doc)) == 1, doc["_stderr"]


def test_a_record_pointing_at_another_valid_object_is_refused(
    tmp_path: Path, remote: Remote
) -> None:
    _honest(tmp_path, remote)
    records = remote.records()
    ask = remote.record_of("llm@1", lambda r: "hello" in r["output"]["text"].lower())
    other = remote.record_of("llm@1", lambda r: "goodbye" in r["output"]["text"].lower())
    theirs = records[other]["output"]["sha256"]

    def point_elsewhere(doc: dict[str, Any]) -> None:
        doc["artifacts"] = {theirs: records[other]["artifacts"][theirs]}
        doc["output"]["sha256"] = theirs

    remote.edit(ask, point_elsewhere)
    b = _clone(tmp_path / "b", remote, writable=False)
    doc = _apply(b, remote)
    assert doc["exit_code"] == 0, doc
    assert _statuses(doc)["ask"] == "ran" and _statuses(doc)["other"] == "cached"
    assert doc["remote"]["refused"] == 1 and "sha256 object" in _refusals(doc)[0]
    verify = subprocess.run(
        [*runner_bin(), "verify", "--json"], cwd=b, capture_output=True, text=True, timeout=60
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_inline_values_not_matching_their_digest_are_refused(
    tmp_path: Path, remote: Remote
) -> None:
    _honest(tmp_path, remote)
    ask = remote.record_of("llm@1", lambda r: "hello" in r["output"]["text"].lower())
    prompt = remote.record_of("template@2", lambda r: True)
    remote.edit(ask, lambda doc: doc["output"].update(text="a; touch PWNED"))
    remote.edit(prompt, lambda doc: doc["output"].update(text="hello a; touch PWNED"))
    b = _clone(tmp_path / "b", remote, writable=False)
    doc = _apply(b, remote)
    assert doc["exit_code"] == 0, doc
    assert _statuses(doc)["ask"] == "ran" and _statuses(doc)["prompt"] == "ran"
    assert doc["remote"]["refused"] == 2
    refusals = _refusals(doc)
    assert len(refusals) == 1 and "2 record(s)" in refusals[0], doc["_stderr"]
    shown = subprocess.run(
        [*runner_bin(), "runs", "show", doc["run"]["id"], "--json"],
        cwd=b,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "PWNED" not in shown.stdout


def test_with_a_team_key_signed_records_are_used_and_mis_signed_ones_refused(
    tmp_path: Path, remote: Remote
) -> None:
    key = {KEY_VAR: "team-cache-key-0123456789"}
    _honest(tmp_path, remote, **key)
    assert all(r["signature"].startswith("hmac-sha256:") for r in remote.records().values())
    # Signed and untouched: every step is answered by the remote.
    b = _clone(tmp_path / "b", remote, writable=False, signed=True)
    doc = _apply(b, remote, **key)
    assert set(_statuses(doc).values()) == {"cached"}, doc
    assert doc["remote"]["refused"] == 0
    # One record edited (its signature kept), one re-signed with another key.
    ask = remote.record_of("llm@1", lambda r: "hello" in r["output"]["text"].lower())
    remote.edit(ask, lambda d: d["output"].update(model=f"{d['output']['model']}-edited"))
    make = remote.record_of("shell@1", lambda r: "out.txt" in r["files"])
    remote.edit(make, lambda d: d.update(signature="hmac-sha256:" + "0" * 64))
    c = _clone(tmp_path / "c", remote, writable=False, signed=True)
    doc = _apply(c, remote, **key)
    assert doc["exit_code"] == 0, doc
    assert _statuses(doc)["ask"] == "ran" and _statuses(doc)["make"] == "ran"
    assert _statuses(doc)["other"] == "cached"
    assert doc["remote"]["refused"] == 2 and "not signed with the team's key" in doc["_stderr"]


def test_with_a_team_key_unsigned_records_are_refused(tmp_path: Path, remote: Remote) -> None:
    _honest(tmp_path, remote)  # pushed by a clone that signs nothing
    b = _clone(tmp_path / "b", remote, writable=False, signed=True)
    doc = _apply(b, remote, **{KEY_VAR: "team-cache-key-0123456789"})
    assert doc["exit_code"] == 0, doc
    assert set(_statuses(doc).values()) == {"ran"}
    assert doc["remote"]["refused"] == 5
    refusals = _refusals(doc)
    assert len(refusals) == 1 and "is not signed" in refusals[0], doc["_stderr"]
    # Without the key's variable, the remote is not used at all (nothing can be checked).
    c = _clone(tmp_path / "c", remote, writable=False, signed=True)
    doc = _apply(c, remote)
    assert set(_statuses(doc).values()) == {"ran"}
    assert KEY_VAR in doc["_stderr"] and "not set" in doc["_stderr"]


def test_a_record_nested_too_deeply_is_refused_not_a_crash(tmp_path: Path, remote: Remote) -> None:
    _honest(tmp_path, remote)
    ask = remote.record_of("llm@1", lambda r: "hello" in r["output"]["text"].lower())
    deep = "[" * 985 + "]" * 985

    def nest(doc: dict[str, Any]) -> None:
        doc["output"]["json"] = "DEEP"

    remote.edit(ask, nest)
    path_text = remote.get(ask).decode().replace('"DEEP"', deep)
    remote.put(ask, path_text.encode())
    b = _clone(tmp_path / "b", remote, writable=False)
    doc = _apply(b, remote)
    assert doc["exit_code"] == 0, doc
    assert _statuses(doc)["ask"] == "ran" and doc["remote"]["refused"] == 1


def test_runner_cache_push_signs_with_the_team_key(tmp_path: Path, remote: Remote) -> None:
    key = {KEY_VAR: "team-cache-key-0123456789"}
    w = _clone(tmp_path / "w", remote, writable=True, signed=True, push="manual")
    assert _apply(w, remote, **key)["exit_code"] == 0
    assert remote.records() == {}
    refused = _apply(w, remote, "cache", "push")  # the key's variable unset: nothing is pushed
    assert refused["exit_code"] != 0 and KEY_VAR in refused["error"]["message"], refused
    pushed = _apply(w, remote, "cache", "push", **key)
    assert pushed["pushed"] == 5, pushed
    assert all(r["signature"].startswith("hmac-sha256:") for r in remote.records().values())
    b = _clone(tmp_path / "b", remote, writable=False, signed=True)
    assert set(_statuses(_apply(b, remote, **key)).values()) == {"cached"}
