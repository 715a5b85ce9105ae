"""Secrets are masked everywhere runner stores, prints or serves, and are not in what a step's
process can read of runner (issue 33, item 3).

Classes:
- PROC: a shell step reading runner's environment (/proc/$PPID/environ, and /proc/<pid>/environ
  read by the test while runner runs) finds no secret; its stdout reaches neither the journal,
  `runs show --json`, the web API nor the page;
- PRINT: a pass_env command failing with the key in its stderr, and an error message quoting a
  secret (a step's failure, a command's error), show `***` on the terminal and in --json;
- SHORT: a value under MIN_SECRET_CHARS masks nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.surfaces.web.app import create_app

from ..webdriving import TOKEN

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

KEY = "sk-proj-" + "Zq8wXe4rTy6uIo2pAs5dFg7hJk9lQm3n"  # a provider key (runner.toml names it)
TOKEN_VALUE = "ghp_" + "0a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P"  # credential-looking name, no toml

PEEK = """\
runner: 1
name: leak
steps:
  peek:
    uses: shell
    # A hostile step reading runner's own environment: unconfined, as where there is no
    # sandbox (macOS, an old kernel); confined, runner is not in its pid namespace to read.
    sandbox: false
    with:
      run: |
        echo "$PPID" > ppid.txt
        tr '\\0' '\\n' < /proc/$PPID/environ | grep -a -e LLM_CRED_VAR -e SERVICE_TOKEN
        touch ready
        for i in $(seq 200); do [ -e go ] && break; sleep 0.05; done
"""


def _project(root: Path, pipeline: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "runner.toml").write_text(
        '[providers.openai]\nbase_url = "http://127.0.0.1:9/v1"\napi_key_env = "LLM_CRED_VAR"\n',
        encoding="utf-8",
    )
    (root / "p.yaml").write_text(textwrap.dedent(pipeline), encoding="utf-8")
    return root


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    env.update({"NO_COLOR": "1", "LLM_CRED_VAR": KEY, "SERVICE_TOKEN": TOKEN_VALUE, **extra})
    return env


def _runner(root: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner", *args],
        cwd=root,
        env=_env(**extra),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _no_secret(blob: bytes | str, where: str) -> None:
    data = blob if isinstance(blob, bytes) else blob.encode()
    for secret in (KEY, TOKEN_VALUE):
        assert secret.encode() not in data, f"{secret[:8]}... in {where}"
        assert secret[8:24].encode() not in data, f"a piece of {secret[:8]}... in {where}"


@pytest.fixture(autouse=True)
def _forget() -> Iterator[None]:
    yield
    try:  # imported here: each test says what it shows even where masking is missing
        from runner.source import secretmask
    except ImportError:
        return
    secretmask.forget()


def test_a_step_reading_runners_environment_finds_no_secret_and_stores_none(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path / "p", PEEK)
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner", "apply", "p.yaml", "--json", "-q"],
        cwd=root,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (root / "ready").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        # The step's parent is runner itself; its environment, read from outside meanwhile.
        assert int((root / "ppid.txt").read_text()) == proc.pid
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        (root / "go").touch()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _no_secret(environ, f"/proc/{proc.pid}/environ")
    assert b"LLM_CRED_VAR=" in environ  # the variable is there, its value is not
    doc = json.loads(out)
    assert doc["exit_code"] == 0, err
    _no_secret(out + err, "apply's output")
    for path in (root / ".runner").rglob("*"):
        if path.is_file():
            _no_secret(path.read_bytes(), str(path))
    shown = _runner(root, "runs", "show", doc["run"]["id"], "--json")
    assert shown.returncode == 0, shown.stderr
    stdout = json.loads(shown.stdout)["executions"][0]["output"]["stdout"]
    assert "LLM_CRED_VAR=" in stdout and "SERVICE_TOKEN=" in stdout  # it did read the block
    _no_secret(shown.stdout + shown.stderr, "runs show --json")
    app = create_app(root / ".runner", TOKEN, extra_hosts=["testserver"], cwd=root)
    with TestClient(app) as client:
        assert client.get(f"/?token={TOKEN}", follow_redirects=False).status_code == 303
        api = client.get(f"/api/runs/{doc['run']['id']}")
        assert api.status_code == 200 and "LLM_CRED_VAR=" in api.text
        _no_secret(api.text, "the web API")
        page = client.get(f"/runs/{doc['run']['id']}")
        _no_secret(page.text, "the run's page")


FAILING = """\
runner: 1
name: fail
steps:
  call:
    uses: shell
    retries: 0
    with:
      run: 'echo "request refused for key $LLM_CRED_VAR / $SERVICE_TOKEN" >&2; exit 3'
      pass_env: [LLM_CRED_VAR, SERVICE_TOKEN]
"""


def test_a_pass_env_command_failing_with_the_key_in_stderr_shows_it_masked(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path / "p", FAILING)
    res = _runner(root, "apply", "p.yaml")
    assert res.returncode != 0
    assert "request refused for key ***" in res.stderr, res.stderr
    _no_secret(res.stdout + res.stderr, "the terminal")
    as_json = _runner(root, "apply", "p.yaml", "--json")
    _no_secret(as_json.stdout + as_json.stderr, "apply --json")
    for path in (root / ".runner").rglob("*"):
        if path.is_file():
            _no_secret(path.read_bytes(), str(path))


READ = """\
runner: 1
name: readit
params:
  where: {type: string}
  note: {type: string, default: ""}
steps:
  get:
    uses: read
    with: {path: "${{ params.where }}"}
"""


def test_a_secret_in_an_error_message_is_masked(tmp_path: Path) -> None:
    root = _project(tmp_path / "p", READ)
    # A step's failure quoting it (and the run's params holding it).
    res = _runner(root, "apply", "p.yaml", "-p", f"where=notes-{KEY}.txt", "--json")
    assert res.returncode != 0
    assert "notes-***" in res.stdout, res.stdout
    _no_secret(res.stdout + res.stderr, "apply's error")
    for path in (root / ".runner").rglob("*"):
        if path.is_file():
            _no_secret(path.read_bytes(), str(path))
    # A run that succeeds with it in its params records them masked (journal, fingerprint).
    (root / "notes.txt").write_text("fine", encoding="utf-8")
    for _ in range(2):  # the second is a no-op, written from the fingerprint
        res = _runner(
            root, "apply", "p.yaml", "-p", "where=notes.txt", "-p", f"note={KEY}", "--json"
        )
        assert json.loads(res.stdout)["exit_code"] == 0, res.stderr
    for path in (root / ".runner").rglob("*"):
        if path.is_file():
            _no_secret(path.read_bytes(), str(path))
    # A command's own error quoting it, as text and as JSON.
    for args in (("runs", "show", TOKEN_VALUE), ("runs", "show", TOKEN_VALUE, "--json")):
        res = _runner(root, *args)
        assert res.returncode != 0 and "***" in res.stdout + res.stderr, res.stderr
        _no_secret(res.stdout + res.stderr, " ".join(args[:2]))


def test_a_short_secret_masks_nothing(tmp_path: Path) -> None:
    root = _project(tmp_path / "p", FAILING.replace("exit 3", "exit 0"))
    short = {"LLM_CRED_VAR": "abc", "SERVICE_TOKEN": "1234567"}
    res = _runner(root, "apply", "p.yaml", "--json", **short)
    doc = json.loads(res.stdout)
    assert doc["exit_code"] == 0, res.stderr
    shown = _runner(root, "runs", "show", doc["run"]["id"], "--json", **short)
    assert "request refused for key abc / 1234567" in shown.stdout, shown.stdout
    # A value naming a file is not masked either: every path under it would be.
    creds = root / "creds.json"
    creds.write_text("{}", encoding="utf-8")
    res = _runner(root, "apply", "p.yaml", "--json", "--force", "call", APP_CREDENTIALS=str(root))
    doc = json.loads(res.stdout)
    assert doc["exit_code"] == 0, res.stderr
    shown = _runner(root, "runs", "show", doc["run"]["id"], "--json", APP_CREDENTIALS=str(root))
    assert json.loads(shown.stdout)["run"]["pipeline_file"] == str(root / "p.yaml")
    from runner.source.secretmask import MIN_SECRET_CHARS

    assert len(KEY) >= MIN_SECRET_CHARS > len("1234567")


def test_rows_older_than_masking_are_masked_when_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server masks what it sends too: rows a runner without masking wrote still hold the
    key, and the API and page do not show it."""
    import sqlite3

    root = _project(tmp_path / "p", FAILING.replace("exit 3", "exit 0"))
    res = _runner(root, "apply", "p.yaml", "--json")
    run_id = json.loads(res.stdout)["run"]["id"]
    with sqlite3.connect(root / ".runner" / "journal.db") as conn:  # as an old runner wrote it
        conn.execute("UPDATE executions SET error=? WHERE run_id=?", (f"old {KEY}", run_id))
        conn.execute(
            "INSERT INTO events (run_id, ts, type, step_id, element, data) VALUES (?,?,?,?,?,?)",
            (run_id, time.time(), "log", "call", None, json.dumps({"line": f"old {KEY}"})),
        )
    from runner.source import secretmask

    monkeypatch.setenv("LLM_CRED_VAR", KEY)
    secretmask.learn_project(root)
    app = create_app(root / ".runner", TOKEN, extra_hosts=["testserver"], cwd=root)
    with TestClient(app) as client:
        client.get(f"/?token={TOKEN}", follow_redirects=False)
        api = client.get(f"/api/runs/{run_id}")
        assert api.status_code == 200 and "old ***" in api.text, api.text
        assert int(api.headers["content-length"]) == len(api.content)
        _no_secret(api.text, "the web API")
        _no_secret(client.get(f"/runs/{run_id}").text, "the run's page")
        for stream in (False, True):
            events = client.get(f"/api/runs/{run_id}/events", params={"stream": int(stream)})
            assert events.status_code == 200 and "old ***" in events.text, events.text
            _no_secret(events.text, f"the events (stream={stream})")


def test_wiping_the_initial_environment_is_what_proc_shows() -> None:
    """Measured: deleting from os.environ leaves /proc/PID/environ as it was; wiping the
    block in place empties it there, and runner still reads its own copy."""
    script = textwrap.dedent(
        """\
        import os, sys
        from runner.source.secretnames import wipe_initial_environ
        def shown():
            return open(f"/proc/{os.getpid()}/environ", "rb").read()
        key = os.environ["MY_KEY_VAR"].encode()
        del os.environ["OTHER_KEY_VAR"]
        print(key in shown(), b"other-value-1234" in shown())
        print(wipe_initial_environ(["MY_KEY_VAR", "OTHER_KEY_VAR"]))
        print(key in shown(), b"other-value-1234" in shown(), os.environ["MY_KEY_VAR"].encode() == key)
        """
    )
    env = {**os.environ, "MY_KEY_VAR": KEY, "OTHER_KEY_VAR": "other-value-1234"}
    res = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert res.stdout.split() == ["True", "True", "2", "False", "False", "True"], res.stderr
    from runner.source.secretnames import wipe_initial_environ

    assert wipe_initial_environ([]) == 0


ON_DASK = """\
runner: 1
name: worker
steps:
  peek:
    uses: shell
    with:
      run: |
        tr '\\0' '\\n' < /proc/$PPID/environ | grep -a -c -e "$LLM_CRED_VAR" || true
        [ "$LLM_CRED_VAR" = "$EXPECTED" ] && echo "pass_env arrived"
      pass_env: [LLM_CRED_VAR]
      env: {EXPECTED: "unused"}
"""


def test_on_local_dask_workers_pass_env_arrives_and_proc_holds_no_secret(tmp_path: Path) -> None:
    """A local cluster's worker inherits runner's wiped environment: it is given the secrets
    itself (not in its /proc/PID/environ), so a body's pass_env still gets the value."""
    pytest.importorskip("distributed")
    root = _project(tmp_path / "p", ON_DASK.replace('"unused"', json.dumps(KEY)))
    res = _runner(root, "apply", "p.yaml", "--json", "--executor", "dask", "--workers", "1")
    doc = json.loads(res.stdout)
    assert doc["exit_code"] == 0, res.stderr
    shown = _runner(root, "runs", "show", doc["run"]["id"], "--json")
    stdout = json.loads(shown.stdout)["executions"][0]["output"]["stdout"]
    assert stdout.split("\n")[:2] == ["0", "pass_env arrived"], stdout


INGEST = """\
runner: 1
name: keep
steps:
  say:
    uses: shell
    with:
      run: 'echo "note: the key is $LLM_CRED_VAR"'
      pass_env: [LLM_CRED_VAR]
  keep:
    uses: ingest
    with:
      collection: notes
      create: true
      documents: [{id: "1", text: "${{ steps.say.output.stdout }}"}]
"""


def test_a_document_ingested_with_a_secret_is_stored_masked(tmp_path: Path) -> None:
    root = _project(tmp_path / "p", INGEST)
    res = _runner(root, "apply", "p.yaml", "--json")
    assert json.loads(res.stdout)["exit_code"] == 0, res.stderr
    stored = b"".join(p.read_bytes() for p in (root / ".runner").glob("collections.db*"))
    assert b"note: the key is ***" in stored
    _no_secret(stored, "collections.db")


def test_the_quick_look_never_skips_a_text_the_redactor_would_mask() -> None:
    """Rows are masked only when a secret's first or last 4 characters are in them (most rows
    hold neither): every text holding a key, or a head or tail of one of 6 or more, is masked
    exactly as the full redactor (without pieces) masks it."""
    import random
    import string

    from runner.source import secretmask
    from runner.source.redact import Redactor

    secretmask.learn(["A_VAR", "B_VAR"], {"A_VAR": KEY, "B_VAR": TOKEN_VALUE})
    full = Redactor([KEY, TOKEN_VALUE], headers=False, pieces=False)
    rng = random.Random(33)
    letters = string.ascii_letters + string.digits + " -_"
    for _ in range(5000):
        secret = rng.choice([KEY, TOKEN_VALUE])
        a = rng.randrange(len(secret))
        b = rng.randrange(a, len(secret) + 1)
        noise = ["".join(rng.choice(letters) for _ in range(rng.randrange(12))) for _ in "ab"]
        text = noise[0] + secret[a:b] + noise[1]
        assert secretmask.mask(text) == full.redact(text), text
    assert secretmask.mask(f"x {KEY} y") == "x *** y"
    assert not secretmask.may_hold("an ordinary row with no key in it")
