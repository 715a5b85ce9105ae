"""Batch mode end to end: runner in a subprocess against the loopback OpenAI batch double.

A ``batch: true`` for_each sends its calls as one batch (custom_id = call key), the run suspends
(awaiting_batch, exit 11), a later apply collects it; kill -9 of runner while the batch is
being made or while it runs never makes a second batch nor sends an element twice; an answer
made directly is never put in a batch, and a batch's answers are the direct ones.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import runner_bin
from tests.providers.openai_batch_server import OpenAIBatchServer

AWAITING_BATCH = 11
SECRET = "sk-batch-Zq7xW3vK9pL2mN8rT4yU6hJ1"


def _project(root: Path, url: str, n: int, *, batch: bool = True, extra: str = "") -> Path:
    (root / "runner.toml").write_text(
        textwrap.dedent(
            f"""\
            [general]
            default_provider = "openai"

            [providers.openai]
            base_url = "{url}/v1"
            model = "test-chat"
            image_model = "gpt-image-1"
            api_key_env = "TEST_OPENAI_KEY"
            max_concurrency = 4
            timeout = 10
            retry_base_delay = 0.05
            retry_max_delay = 0.1
            {extra}
            """
        ),
        encoding="utf-8",
    )
    pipeline = root / "pipeline.yaml"
    write_pipeline(pipeline, n, batch=batch)
    return pipeline


def write_pipeline(pipeline: Path, n: int, *, batch: bool, start: int = 0) -> None:
    items = json.dumps(list(range(start, n)))
    pipeline.write_text(
        textwrap.dedent(
            f"""\
            runner: 1
            name: batched
            steps:
              ask:
                uses: llm
                for_each: {items}
                with:
                  prompt: "word ${{{{ item }}}}"
                  batch: {str(batch).lower()}
                check:
                  - "${{{{ output.text.startswith('echo') }}}}"
            """
        ),
        encoding="utf-8",
    )


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    env.update(NO_COLOR="1", TEST_OPENAI_KEY=SECRET)
    return env


def _apply(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*runner_bin(), "apply", "pipeline.yaml", *args],
        cwd=root,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def _outputs(root: Path) -> dict[str, str]:
    """call key -> reply text, from the ledger."""
    db = sqlite3.connect(root / ".runner" / "journal.db")
    try:
        rows = db.execute("SELECT key, result FROM calls WHERE status='completed'").fetchall()
    finally:
        db.close()
    return {k: json.loads(r)["text"] for k, r in rows}


def _run_status(root: Path) -> list[str]:
    db = sqlite3.connect(root / ".runner" / "journal.db")
    try:
        return [r[0] for r in db.execute("SELECT status FROM runs ORDER BY created_at")]
    finally:
        db.close()


def _run_ids(root: Path) -> list[str]:
    db = sqlite3.connect(root / ".runner" / "journal.db")
    try:
        return [r[0] for r in db.execute("SELECT id FROM runs ORDER BY created_at")]
    finally:
        db.close()


def _until(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def _texts(n: int, start: int = 0) -> set[str]:
    return {f"echo: word {i}" for i in range(start, n)}


def test_a_for_each_goes_as_one_batch_and_a_later_apply_collects_it(tmp_path: Path) -> None:
    with OpenAIBatchServer(tmp_path / "double", api_key=SECRET) as server:
        assert isinstance(server, OpenAIBatchServer)
        _project(tmp_path, server.url, 1000)
        first = _apply(tmp_path)
        assert first.returncode == AWAITING_BATCH, first.stdout + first.stderr
        assert _run_status(tmp_path) == ["awaiting_batch"]
        batches = server.batches()
        assert len(batches) == 1 and batches[0]["request_counts"]["total"] == 1000
        assert server.count("POST", "/v1/chat/completions") == 0  # nothing went directly
        show = subprocess.run(
            [*runner_bin(), "runs", "show", "--json", _run_ids(tmp_path)[0]],
            cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        (shown,) = json.loads(show.stdout)["batches"]
        assert shown["status"] == "submitted" and shown["total"] == 1000
        assert shown["remote_id"] == batches[0]["id"]
        plan = subprocess.run(
            [*runner_bin(), "plan", "pipeline.yaml"],
            cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        waiting = f"in batch {shown['id']} (waiting)"  # paid there: no new cost
        assert plan.stdout.count(waiting) == 1000 + 1, plan.stdout[:2000]  # (and the calls line)
        second = _apply(tmp_path)
        assert second.returncode == 0, second.stdout + second.stderr
        assert set(_outputs(tmp_path).values()) == _texts(1000)
        assert len(server.batches()) == 1
        assert max(server.answered().values()) == 1 and len(server.answered()) == 1000
        assert _run_status(tmp_path) == ["completed"]  # the same run, resumed


class _Runner:
    """``runner apply`` in the background, to be killed with SIGKILL at a chosen moment."""

    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen(
            [*runner_bin(), "apply", "pipeline.yaml"],
            cwd=root,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def kill(self) -> None:
        assert self.proc.poll() is None, "runner ended before it could be killed"
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


def _status(server: OpenAIBatchServer) -> str | None:
    batches = server.batches()
    return str(batches[0]["status"]) if batches else None


def test_kill_9_while_uploading_validating_and_running_makes_one_batch(tmp_path: Path) -> None:
    n = 1000
    with OpenAIBatchServer(
        tmp_path / "double",
        upload_delay_s=5.0,
        create_delay_s=5.0,
        # long enough that a runner started on a loaded machine still finds each state
        validate_s=8.0,
        # 3 s in progress: long enough to be seen there and killed; runner's looks at a batch
        # back off (1, 2, 4 s...), so a longer one only makes the last apply wait longer
        per_request_s=0.003,
    ) as server:
        assert isinstance(server, OpenAIBatchServer)
        _project(tmp_path, server.url, n, extra="batch_wait = 60")
        # 1. killed once its file is stored, before the upload's reply (its id) came back
        run = _Runner(tmp_path)
        _until(lambda: len(server.uploads()) == 1, "the upload")
        run.kill()
        assert server.batches() == []
        # 2. killed once the batch is made, before the reply to its creation came back
        run = _Runner(tmp_path)
        _until(lambda: _status(server) is not None, "the batch's creation")
        run.kill()
        # 3. killed while it polls the batch, validating
        run = _Runner(tmp_path)
        _until(lambda: server.count("GET", f"/v1/batches/{server.batches()[0]['id']}") > 0,
               "a look at the batch")  # fmt: skip
        assert _status(server) == "validating"
        run.kill()
        # 4. killed while it polls the batch, in progress
        run = _Runner(tmp_path)
        _until(lambda: _status(server) == "in_progress", "the batch in progress")
        time.sleep(0.5)
        run.kill()
        assert _status(server) == "in_progress"
        done = _apply(tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert len(server.uploads()) == 1 and len(server.batches()) == 1
        answered = server.answered()
        assert len(answered) == n and set(answered.values()) == {1}  # 0 elements sent twice
        assert set(_outputs(tmp_path).values()) == _texts(n)
        assert server.count("POST", "/v1/chat/completions") == 0
        # each killed apply is found interrupted by the next, which starts a run of its own
        assert _run_status(tmp_path) == ["interrupted"] * 4 + ["completed"]


def _set_check(pipeline: Path, check: str, *, batch: bool) -> None:
    text = pipeline.read_text(encoding="utf-8")
    text = text.replace("startswith('echo')", check).replace("startswith('ech')", check)
    text = text.replace(f"batch: {str(not batch).lower()}", f"batch: {str(batch).lower()}")
    pipeline.write_text(text, encoding="utf-8")


def test_answers_direct_and_by_batch_are_one_ledger(tmp_path: Path) -> None:
    """Half answered directly, the rest by a batch: the outputs are an all-direct run's; a
    call answered either way is never sent again, by a batch or directly."""
    n = 200
    with OpenAIBatchServer(tmp_path / "double") as server:
        assert isinstance(server, OpenAIBatchServer)
        mixed, alone = tmp_path / "mixed", tmp_path / "alone"
        mixed.mkdir()
        alone.mkdir()
        _project(alone, server.url, n, batch=False)
        assert _apply(alone).returncode == 0
        direct = server.count("POST", "/v1/chat/completions")
        assert direct == n
        pipeline = _project(mixed, server.url, n // 2, batch=False, extra="batch_wait = 30")
        assert _apply(mixed).returncode == 0  # the first half directly (their keys: alone's)
        direct = server.count("POST", "/v1/chat/completions")
        assert direct == n + n // 2
        write_pipeline(pipeline, n, batch=True)
        _set_check(pipeline, "startswith('ech')", batch=True)  # every step key changes
        done = _apply(mixed)
        assert done.returncode == 0, done.stdout + done.stderr
        (batch,) = server.batches()
        assert batch["request_counts"]["total"] == n // 2  # the answered half stayed out
        assert _outputs(mixed) == _outputs(alone)  # the same keys, the same texts
        assert server.count("POST", "/v1/chat/completions") == direct
        _set_check(pipeline, "startswith('echo')", batch=False)
        again = _apply(mixed)
        assert again.returncode == 0, again.stdout + again.stderr
        assert server.count("POST", "/v1/chat/completions") == direct  # batch answers reused
        assert len(server.batches()) == 1


def test_failed_requests_follow_retries_and_expired_ones_go_again(tmp_path: Path) -> None:
    """A 500 in the error file is retried (the step's retries) in a follow-up batch; requests
    an expired batch never ran go in a new batch; none is executed twice once answered."""
    n = 60
    with OpenAIBatchServer(
        tmp_path / "double",
        fail_once="word 1",  # word 1, word 10..19: a 500 the first time
        expiring=1,
        expire_s=1.0,
        per_request_s=0.03,
    ) as server:
        assert isinstance(server, OpenAIBatchServer)
        pipeline = _project(tmp_path, server.url, n, extra="batch_wait = 30")
        pipeline.write_text(pipeline.read_text().replace("    with:", "    retries: 2\n    with:"))
        done = _apply(tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        batches = sorted(server.batches(), key=lambda b: b["created_at"])
        assert batches[0]["status"] == "expired" and len(batches) >= 2
        assert all(b["status"] == "completed" for b in batches[1:])
        assert set(_outputs(tmp_path).values()) == _texts(n)
        answered = server.answered()
        assert len(answered) == n
        # word 1 and 10..19 ran twice (a 500, then their answer), the others once
        assert sorted(answered.values()) == [1] * (n - 11) + [2] * 11
        assert server.billed == n  # each answered (and billed) exactly once


def test_runs_cancel_cancels_the_remote_batch_and_resume_sends_the_rest(tmp_path: Path) -> None:
    n = 50
    with OpenAIBatchServer(tmp_path / "double", per_request_s=0.1) as server:
        assert isinstance(server, OpenAIBatchServer)
        _project(tmp_path, server.url, n)
        first = _apply(tmp_path)
        assert first.returncode == AWAITING_BATCH, first.stdout + first.stderr
        db = sqlite3.connect(tmp_path / ".runner" / "journal.db")
        (run_id,) = db.execute("SELECT id FROM runs").fetchone()
        db.close()
        time.sleep(1.0)  # some of it done
        cancel = subprocess.run(
            [*runner_bin(), "runs", "cancel", run_id, "--json"],
            cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert cancel.returncode == 0, cancel.stdout + cancel.stderr
        assert json.loads(cancel.stdout)["batches_cancelled"] == 1
        (batch,) = server.batches()
        assert batch["status"] == "cancelled"
        ran = batch["request_counts"]["completed"]
        assert 0 < ran < n
        resumed = subprocess.run(
            [*runner_bin(), "resume", run_id],
            cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert resumed.returncode == AWAITING_BATCH, resumed.stdout + resumed.stderr
        second = [b for b in server.batches() if b["id"] != batch["id"]]
        assert len(second) == 1 and second[0]["request_counts"]["total"] == n - ran


def test_a_step_larger_than_one_batch_is_split_and_the_double_restarts(tmp_path: Path) -> None:
    n = 250
    with OpenAIBatchServer(tmp_path / "double", validate_s=0.5) as server:
        assert isinstance(server, OpenAIBatchServer)
        port = int(server.url.rsplit(":", 1)[1])
        _project(tmp_path, server.url, n, extra="batch_max_requests = 100")
        first = _apply(tmp_path)
        assert first.returncode == AWAITING_BATCH, first.stdout + first.stderr
        assert sorted(b["request_counts"]["total"] for b in server.batches()) == [50, 100, 100]
    # the service restarts (same address, same disk): the batches go on
    with OpenAIBatchServer(tmp_path / "double", port=port) as server:
        assert isinstance(server, OpenAIBatchServer)
        time.sleep(0.6)
        done = _apply(tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert len(server.batches()) == 3
        assert set(_outputs(tmp_path).values()) == _texts(n)


def _image_pipeline(root: Path, n: int) -> None:
    items = json.dumps(list(range(n)))
    (root / "pipeline.yaml").write_text(
        textwrap.dedent(
            f"""\
            runner: 1
            name: drawn
            steps:
              draw:
                uses: image
                for_each: {items}
                with:
                  prompt: "picture ${{{{ item }}}}"
                  size: "1024x1024"
                  batch: true
            """
        ),
        encoding="utf-8",
    )


def _images(root: Path) -> dict[str, Any]:
    """call key -> the colour of the image its ledger row names (read from the object store)."""
    from PIL import Image

    db = sqlite3.connect(root / ".runner" / "journal.db")
    try:
        rows = db.execute("SELECT key, result FROM calls WHERE status='completed'").fetchall()
    finally:
        db.close()
    out = {}
    for key, result in rows:
        digest = json.loads(result)["digest"]
        path = root / ".runner" / "objects" / digest[:2] / digest[2:]
        with Image.open(path) as img:
            out[key] = img.convert("RGB").getpixel((0, 0))
    return out


def test_an_image_step_in_batch_mode_survives_kill_9(tmp_path: Path) -> None:
    """/v1/images/generations by batch: killed while uploading, validating and running, then
    applied: one batch, each image made once, each the image its prompt asks for."""
    n = 40
    with OpenAIBatchServer(
        tmp_path / "double",
        upload_delay_s=5.0,
        validate_s=3.0,
        per_request_s=0.05,  # 2 s in progress (see the test above)
        api_key=SECRET,
    ) as server:
        assert isinstance(server, OpenAIBatchServer)
        _project(tmp_path, server.url, 1, extra="batch_wait = 60")
        _image_pipeline(tmp_path, n)
        run = _Runner(tmp_path)
        _until(lambda: len(server.uploads()) == 1, "the upload")
        run.kill()
        run = _Runner(tmp_path)
        _until(lambda: _status(server) == "validating", "the batch, validating")
        time.sleep(0.5)
        run.kill()
        run = _Runner(tmp_path)
        _until(lambda: _status(server) == "in_progress", "the batch in progress")
        time.sleep(0.5)
        run.kill()
        done = _apply(tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        (batch,) = server.batches()
        assert batch["endpoint"] == "/v1/images/generations"
        assert len(server.uploads()) == 1
        answered = server.answered()
        assert len(answered) == n and set(answered.values()) == {1}
        assert server.count("POST", "/v1/images/generations") == 0
        from tests.providers.servers import colour_of

        assert sorted(_images(tmp_path).values()) == sorted(
            colour_of(f"picture {i}") for i in range(n)
        )


def test_plan_prices_a_batch_step_at_the_batch_price_and_says_it_suspends(tmp_path: Path) -> None:
    prices = "batch_wait = 0\n[prices.openai]\ninput_per_1k = 0.002\noutput_per_1k = 0.004"
    pipeline = _project(tmp_path, "http://127.0.0.1:9", 10, batch=False, extra=prices)

    def plan() -> tuple[dict[str, Any], str]:
        args = [*runner_bin(), "plan", "pipeline.yaml"]
        run = dict(cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60)
        doc = json.loads(subprocess.run([*args, "--json"], **run).stdout)  # type: ignore[call-overload]
        return doc, subprocess.run(args, **run).stdout  # type: ignore[call-overload]

    direct, direct_text = plan()
    write_pipeline(pipeline, 10, batch=True)
    batched, text = plan()
    (line,) = batched["cost"]["calls"]
    assert line["batch"] is True and line["calls"] == 10
    assert line["cost"] == pytest.approx(direct["cost"]["calls"][0]["cost"] / 2)
    assert "by batch" in text and "awaiting_batch" in text and "by batch" not in direct_text


def test_a_batch_the_service_fails_fails_its_elements_once(tmp_path: Path) -> None:
    """A batch whose file does not validate fails its elements with the service's reason (not
    resent behind the user's back); the next apply sends them again, in a new batch."""
    with OpenAIBatchServer(tmp_path / "double", refuse="word 3") as server:
        assert isinstance(server, OpenAIBatchServer)
        _project(tmp_path, server.url, 5, extra="batch_wait = 30")
        failed = _apply(tmp_path)
        assert failed.returncode == 4, failed.stdout + failed.stderr  # every element failed
        assert "does not exist" in failed.stdout + failed.stderr
        assert [b["status"] for b in server.batches()] == ["failed"]
        server.refuse = None
        done = _apply(tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert sorted(b["status"] for b in server.batches()) == ["completed", "failed"]
        assert set(_outputs(tmp_path).values()) == _texts(5)


def test_runs_cancel_of_an_apply_waiting_on_its_batch_cancels_the_batch(tmp_path: Path) -> None:
    with OpenAIBatchServer(tmp_path / "double", per_request_s=0.5) as server:
        assert isinstance(server, OpenAIBatchServer)
        _project(tmp_path, server.url, 20, extra="batch_wait = 60")
        run = _Runner(tmp_path)
        _until(lambda: _status(server) == "in_progress", "the batch in progress")
        db = sqlite3.connect(tmp_path / ".runner" / "journal.db")
        (run_id,) = db.execute("SELECT id FROM runs").fetchone()
        db.close()
        cancel = subprocess.run(
            [*runner_bin(), "runs", "cancel", run_id, "--wait", "30"],
            cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert cancel.returncode == 0, cancel.stdout + cancel.stderr
        assert run.proc.wait(timeout=30) == 130
        assert _status(server) == "cancelled"
        assert _run_status(tmp_path) == ["cancelled"]


def test_an_image_step_with_n_sends_its_iterations_as_one_batch(tmp_path: Path) -> None:
    with OpenAIBatchServer(tmp_path / "double", api_key=SECRET) as server:
        assert isinstance(server, OpenAIBatchServer)
        _project(tmp_path, server.url, 1, extra="batch_wait = 30")
        (tmp_path / "pipeline.yaml").write_text(
            textwrap.dedent(
                """\
                runner: 1
                name: drawn
                steps:
                  draw:
                    uses: image
                    with:
                      prompt: "one picture"
                      size: "1024x1024"
                      n: 4
                      batch: true
                """
            ),
            encoding="utf-8",
        )
        done = _apply(tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        (batch,) = server.batches()
        assert batch["request_counts"] == {"total": 4, "completed": 4, "failed": 0}
        assert len(_images(tmp_path)) == 4  # four calls (four keys), each with its image
        assert server.count("POST", "/v1/images/generations") == 0


def test_a_failed_check_is_retried_with_its_feedback_in_a_follow_up_batch(tmp_path: Path) -> None:
    with OpenAIBatchServer(tmp_path / "double") as server:
        assert isinstance(server, OpenAIBatchServer)
        pipeline = _project(tmp_path, server.url, 6, extra="batch_wait = 30")
        text = pipeline.read_text(encoding="utf-8")
        text = text.replace(
            "output.text.startswith('echo')",
            "item != 3 or 'Previous attempt failed because' in output.text",
        ).replace("    with:", "    retries: 1\n    with:")
        pipeline.write_text(text, encoding="utf-8")
        done = _apply(tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        first, follow_up = sorted(server.batches(), key=lambda b: b["created_at"])
        assert first["request_counts"]["total"] == 6
        assert follow_up["request_counts"]["total"] == 1  # element 3, with its feedback
        answers = _outputs(tmp_path).values()
        assert any(a.startswith("echo: word 3") and "Previous attempt failed" in a for a in answers)
        assert server.count("POST", "/v1/chat/completions") == 0


def test_a_call_a_batch_holds_is_not_sent_directly_when_batch_is_taken_off(tmp_path: Path) -> None:
    """`batch: true` taken off while the batch runs: its calls wait for the batch rather than
    being sent (and paid) a second time directly."""
    n = 20
    with OpenAIBatchServer(tmp_path / "double", per_request_s=0.2) as server:
        assert isinstance(server, OpenAIBatchServer)
        pipeline = _project(tmp_path, server.url, n)
        assert _apply(tmp_path).returncode == AWAITING_BATCH
        write_pipeline(pipeline, n, batch=False)
        waiting = _apply(tmp_path)
        assert waiting.returncode == AWAITING_BATCH, waiting.stdout + waiting.stderr
        assert server.count("POST", "/v1/chat/completions") == 0
        _until(lambda: _status(server) == "completed", "the batch's end")
        done = _apply(tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert server.count("POST", "/v1/chat/completions") == 0
        assert set(_outputs(tmp_path).values()) == _texts(n)
        assert len(server.batches()) == 1
