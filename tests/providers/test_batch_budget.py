"""A batch is held under the run's budgets before it is made (issue 41): each line's worst case
at the batch price is reserved, in order; the batch is made of the lines the budget covers, the
run stops (interrupted, exit 9) before the line that would take spend over it, and a budget that
covers none makes no batch at all. runner runs in a subprocess against the loopback OpenAI
batch double; the day's budget is the one the plan's up-front estimate does not judge, so only
the running guard stands between the batch and the service."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

from tests.providers.openai_batch_server import OpenAIBatchServer
from tests.providers.test_batch_mode import (
    SECRET,
    _apply,
    _outputs,
    _project,
    _texts,
    _until,
    write_pipeline,
)

N = 20
# Each line: "word N" is 6-7 characters, 2 input tokens at 1.0 / 1k, and 10 output tokens
# assumed at 2.0 / 1k: 0.022 direct, 0.011 at the batch price.
PRICES = """\
[prices]
currency = "USD"
[prices."openai/test-chat"]
input_per_1k = 1.0
output_per_1k = 2.0
assumed_output_tokens = 10
[budget]
max_cost_per_day = {day}
"""


def _budget(root: Path, day: float) -> None:
    toml = root / "runner.toml"
    text = toml.read_text(encoding="utf-8").split("[prices]")[0]
    toml.write_text(text + PRICES.format(day=day), encoding="utf-8")


def _batch_rows(root: Path) -> list[tuple[str, int]]:
    db = sqlite3.connect(root / ".runner" / "journal.db")
    try:
        return [tuple(r) for r in db.execute("SELECT status, total FROM batches ORDER BY rowid")]
    finally:
        db.close()


def test_a_budget_that_covers_no_line_makes_no_batch(tmp_path: Path) -> None:
    with OpenAIBatchServer(tmp_path / "double", api_key=SECRET) as server:
        assert isinstance(server, OpenAIBatchServer)
        _project(tmp_path, server.url, N)
        _budget(tmp_path, 0.005)  # under one line's 0.011
        out = _apply(tmp_path)
        assert out.returncode == 9, out.stdout + out.stderr
        said = out.stdout + out.stderr
        assert "batch not created: the budget covers none of its 20 requests" in said
        assert "budget 0.005 USD (runner.toml [budget] max_cost_per_day) reached" in said
        assert "request 1 of the 20 of step ask's batch may cost 0.011 USD" in said
        assert server.batches() == [] and server.uploads() == []
        assert _batch_rows(tmp_path) == []  # nothing journaled to re-attach to either


def test_the_batch_is_trimmed_to_the_budget_and_a_raised_budget_sends_the_rest(
    tmp_path: Path,
) -> None:
    with OpenAIBatchServer(tmp_path / "double", api_key=SECRET) as server:
        assert isinstance(server, OpenAIBatchServer)
        _project(tmp_path, server.url, N, extra="batch_wait = 30")
        _budget(tmp_path, 0.1)  # 9 lines (0.099), not 10 (0.11)
        out = _apply(tmp_path)
        assert out.returncode == 9, out.stdout + out.stderr
        said = out.stdout + out.stderr
        assert "batch made of 9 of its 20 requests: the budget covers no more" in said
        assert "request 10 of the 20 of step ask's batch may cost 0.011 USD" in said
        [made] = server.batches()
        assert made["request_counts"]["total"] == 9
        # Raised: the first batch is collected, the 11 others go in a second one.
        _budget(tmp_path, 1.0)
        done = _apply(tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert sorted(b["request_counts"]["total"] for b in server.batches()) == [9, 11]
        answered = server.answered()
        assert len(answered) == N and set(answered.values()) == {1}
    assert set(_outputs(tmp_path).values()) == _texts(N)
    costs = subprocess.run(
        [*_runner(), "costs", "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    doc = json.loads(costs.stdout)
    # the double's 11 prompt and 3 completion tokens a reply, at half price: 0.0085 each
    assert doc["total"]["batch_calls"] == N
    assert abs(doc["total"]["cost"] - N * 0.0085) < 1e-9


def _runner() -> list[str]:
    from tests.conftest import runner_bin

    return list(runner_bin())


def test_plan_counts_elements_waiting_in_a_live_batch_at_no_new_cost(tmp_path: Path) -> None:
    with OpenAIBatchServer(tmp_path / "double", api_key=SECRET, validate_s=60.0) as server:
        assert isinstance(server, OpenAIBatchServer)
        pipeline = _project(tmp_path, server.url, N)
        _budget(tmp_path, 10.0)
        first = _apply(tmp_path)
        assert first.returncode == 11, first.stdout + first.stderr  # awaiting_batch
        [batch_id] = [b for b in _batch_ids(tmp_path)]
        # Two elements more: only they would be sent (and paid), by a new batch.
        write_pipeline(pipeline, N + 2, batch=True)
        plan = subprocess.run(
            [*_runner(), "plan", "pipeline.yaml", "--json"],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        doc = json.loads(plan.stdout)
        calls = {c.get("waiting"): c for c in doc["cost"]["calls"]}
        assert calls[batch_id]["calls"] == N and calls[batch_id]["cost"] == 0
        assert calls[None]["calls"] == 2 and calls[None]["batch"] is True
        assert abs(calls[None]["cost"] - 2 * 0.011) < 1e-9
        assert abs(doc["cost"]["total"] - 2 * 0.011) < 1e-9
        [step] = doc["steps"]
        reasons = [e["reasons"] for e in step["elements"]]
        assert reasons[:N] == [[f"in batch {batch_id} (waiting)"]] * N
        assert all(r != [f"in batch {batch_id} (waiting)"] for r in reasons[N:])
        text = subprocess.run(
            [*_runner(), "plan", "pipeline.yaml"],
            cwd=tmp_path, capture_output=True, text=True, timeout=60,
        ).stdout  # fmt: skip
        assert f"calls: {N} text to openai test-chat in batch {batch_id} (waiting): " in text
        assert "no new cost" in text
        assert len(server.batches()) == 1  # the plan sent nothing


def _batch_ids(root: Path) -> list[str]:
    db = sqlite3.connect(root / ".runner" / "journal.db")
    try:
        return [r[0] for r in db.execute("SELECT id FROM batches ORDER BY rowid")]
    finally:
        db.close()


def test_a_call_never_waits_for_the_lines_of_a_batch() -> None:
    """A direct call over the budget only because of calls in flight waits for them; one over
    it because of a batch's lines is refused at once: a batch may answer hours later."""
    import asyncio

    from runner.providers.prices import Prices
    from runner.providers.spendguard import Budget, OverSpend, SpendGuard

    prices = Prices(rows={"p": {"image": 0.4}}, currency="USD")
    stops: list[str] = []
    guard = SpendGuard(prices, [Budget(1.0, "--max-cost")], on_stop=stops.append)
    lines = [guard.reserve("p", "m", "image", batch=True) for _ in range(4)]  # 4 x 0.2
    assert abs(guard.in_batches - 0.8) < 1e-9 and guard.in_flight == 0.0

    async def direct() -> None:
        await asyncio.wait_for(guard.admit("p", "m", "image"), timeout=5)

    try:
        asyncio.run(direct())
    except OverSpend as exc:
        assert "budget 1 USD (--max-cost) reached" in str(exc)
    else:
        raise AssertionError("a call over the budget beside a batch's lines was sent")
    [why] = stops
    assert "this run spent 0 USD, 0.8 USD in flight, and the next call may cost 0.4 USD" in why
    for hold in lines:  # their answers came back: released, their real cost added as it comes
        guard.settle(hold, None)
    assert guard.in_batches < 1e-9


def test_a_days_budget_counts_the_batches_still_waiting_from_earlier_applies(
    tmp_path: Path,
) -> None:
    """Batches an earlier apply made will be paid when they answer: the day's budget counts
    their lines (at their worst case) until then, so a second apply does not make another batch
    beyond it; once collected, they count at what they cost, not twice."""
    with OpenAIBatchServer(tmp_path / "double", api_key=SECRET, validate_s=8.0) as server:
        assert isinstance(server, OpenAIBatchServer)
        _project(tmp_path, server.url, N)
        _budget(tmp_path, 0.2)  # 18 lines (0.198) of the 20 (0.22)
        first = _apply(tmp_path)
        assert first.returncode == 9, first.stdout + first.stderr
        [made] = server.batches()
        assert made["request_counts"]["total"] == 18 and made["status"] == "validating"
        # 18 x 0.011 still waiting: the 2 others (0.022) do not fit beside them
        second = _apply(tmp_path)
        assert second.returncode == 9, second.stdout + second.stderr
        said = second.stdout + second.stderr
        assert "batch not created: the budget covers none of its 2 requests" in said
        assert "today spent 0 USD, 0.198 USD in flight" in said
        assert len(server.batches()) == 1
        # Collected (18 x 0.0085 = 0.153 real), the 2 others fit under 0.25: 0.153 + 0.022.
        _until(lambda: server.batches()[0]["status"] == "completed", "the first batch")
        # the next batch need not wait: validating for 8 s and runner's backing-off looks at
        # it (1, 2, 4, 8 s) only made the third apply take 15 s
        server.validate_s = 0.0
        toml = tmp_path / "runner.toml"
        toml.write_text(toml.read_text().replace("timeout = 10", "timeout = 10\nbatch_wait = 30"))
        _budget(tmp_path, 0.25)
        third = _apply(tmp_path)
        assert third.returncode == 0, third.stdout + third.stderr
        assert sorted(b["request_counts"]["total"] for b in server.batches()) == [2, 18]
    assert set(_outputs(tmp_path).values()) == _texts(N)


def test_a_carried_line_counts_at_its_cost_once_answered_and_not_at_all_once_failed() -> None:
    from runner.engine.run.spend import RunSpend
    from runner.providers.prices import Prices
    from runner.providers.spendguard import Budget, SpendGuard

    prices = Prices(rows={"openai/m": {"input_per_1k": 1.0, "output_per_1k": 2.0}})
    guard = SpendGuard(prices, [Budget(1.0, "day", "day")])
    spend = RunSpend(guard, lambda _name: {"model": "m"})
    spend.carry({"a": 0.25, "b": 0.25})  # two lines an earlier apply sent, still waiting
    assert guard.carried == 0.5
    meta = {"provider": "openai", "batch": True, "request": {"model": "m", "messages": []}}
    spend.begin("a", meta)
    usage = {"prompt_tokens": 100, "completion_tokens": 50}
    spend.complete("a", {"usage": usage, "metadata": {"batch": True}})
    # its worst case (0.25) gives way to its cost: (0.1 + 0.1) at half price
    assert abs(guard.carried - 0.25) < 1e-9 and abs(guard.spent - 0.1) < 1e-9
    spend.begin("b", meta)
    spend.fail("b", "failed")  # a failed request is not paid
    assert guard.carried == 0.0 and abs(guard.spent - 0.1) < 1e-9
