"""Real spend: every completed call's usage journaled and priced (`runner costs`), and budgets
held on it while a run's calls go out. Against the Anthropic double and the fake provider, with
runner in a subprocess."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runner.engine.run.apply import State
from runner.providers.prices import Prices, spend_cost
from runner.providers.usage import spend_record
from runner.surfaces.web.service import run_document
from tests.conftest import runner_bin
from tests.providers.anthropic_server import AnthropicServer

KEY = "sk-ant-api03-spend0123456789abcdef"
RATES = {"input": 0.003, "output": 0.015, "read": 0.0003, "write": 0.00375}

TAGGING = """\
runner: 1
name: tagging
params:
  items: {type: array, default: ["a fox", "a heron", "an owl"]}
steps:
  tag:
    uses: llm
    for_each: "${{ params.items }}"
    concurrency: 1
    with:
      messages:
        - {role: system, content: "You tag animals. Keep to the schema."}
      prompt: "Tag ${{ item }}"
      max_tokens: 64
      schema:
        type: object
        properties: {tag: {type: string}}
        required: [tag]
    check:
      - "${{ output.json.tag | length > 0 }}"
  pictures:
    uses: image
    with: {provider: fake, prompt: "a fox", n: 2, size: 32x32, seed: 1}
"""


def _project(root: Path, url: str, pipeline: str, extra: str = "") -> None:
    (root / "pipeline.yaml").write_text(pipeline, encoding="utf-8")
    (root / "runner.toml").write_text(
        f"""[general]
default_provider = "anthropic"

[providers.anthropic]
base_url = "{url}/v1"
model = "claude-test"
api_key_env = "TEST_ANTHROPIC_KEY"
timeout = 10
max_tokens = 300

[prices]
currency = "USD"
[prices."anthropic/claude-test"]
input_per_1k = {RATES["input"]}
output_per_1k = {RATES["output"]}
cache_read_per_1k = {RATES["read"]}
cache_write_per_1k = {RATES["write"]}
[prices.fake]
image = 0.02
{extra}""",
        encoding="utf-8",
    )


def _runner(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
    env.update(NO_COLOR="1", TEST_ANTHROPIC_KEY=KEY)
    done = subprocess.run(
        [*runner_bin(), *args], cwd=root, env=env, capture_output=True, text=True, timeout=60
    )
    assert KEY not in done.stdout + done.stderr
    return done


def _by_hand(usage: dict[str, Any]) -> float:
    return (
        float(
            usage["input_tokens"] * RATES["input"]
            + usage["output_tokens"] * RATES["output"]
            + usage["cache_read_input_tokens"] * RATES["read"]
            + usage["cache_creation_input_tokens"] * RATES["write"]
        )
        / 1000
    )


def test_costs_equal_the_doubles_usage_priced_by_hand(tmp_path: Path) -> None:
    with AnthropicServer(api_key=KEY) as server:
        _project(tmp_path, server.url, TAGGING)
        applied = _runner(tmp_path, "apply", "pipeline.yaml", "--json")
        assert json.loads(applied.stdout)["exit_code"] == 0, applied.stdout + applied.stderr
        usages = list(server.usages)
    report = _runner(tmp_path, "costs", "--json")
    doc = json.loads(report.stdout)
    anthropic = sum(_by_hand(u) for u in usages)
    images = 2 * 0.02
    assert len(usages) == 3 and usages[1]["cache_read_input_tokens"] > 0  # the cache was read
    assert doc["total"]["calls"] == 5 and doc["total"]["unpriced_calls"] == 0
    assert doc["total"]["cost"] == pytest.approx(anthropic + images, abs=1e-6)
    models = {(m["provider"], m["model"]): m for m in doc["by_model"]}
    assert models[("anthropic", "claude-test")]["cost"] == pytest.approx(anthropic, abs=1e-6)
    assert models[("anthropic", "claude-test")]["cache_read_tokens"] == sum(
        u["cache_read_input_tokens"] for u in usages
    )
    [fake] = [m for m in doc["by_model"] if m["provider"] == "fake"]
    assert fake["images"] == 2 and fake["cost"] == pytest.approx(images)
    assert sorted(p["provider"] for p in doc["by_provider"]) == ["anthropic", "fake"]
    [run] = doc["by_run"]
    assert run["pipeline"] == "tagging" and run["cost"] == doc["total"]["cost"]
    assert run["estimate"] is not None and run["estimate"] > 0  # the plan's model, same calls
    assert {s["step_id"] for s in doc["by_step"]} == {"tag", "pictures"}
    assert len(doc["by_day"]) == 1 and doc["by_day"][0]["cost"] == doc["total"]["cost"]
    # CSV: one row per call, the same costs
    rows = list(csv.DictReader(io.StringIO(_runner(tmp_path, "costs", "--csv").stdout)))
    assert len(rows) == 5
    assert sum(float(r["cost"]) for r in rows) == pytest.approx(doc["total"]["cost"], abs=1e-5)
    # the text report says it, and --since the future has nothing
    text = _runner(tmp_path, "costs").stdout
    assert f"spent: {doc['total']['cost']:.4g} USD over 5 call(s)" in text, text
    assert "plan's estimate" in text
    later = json.loads(_runner(tmp_path, "costs", "--json", "--since", "2999-01-01").stdout)
    assert later["total"]["calls"] == 0
    # The run's JSON (the page's Spent line reads it) says the same.
    state = State.open(tmp_path / ".runner", readonly=True)
    try:
        spend = run_document(state, run["run_id"])["spend"]
    finally:
        state.close()
    assert spend["cost"] == doc["total"]["cost"] and spend["calls"] == 5
    assert spend["currency"] == "USD" and spend["estimate"] == run["estimate"]


def test_a_call_with_no_price_is_no_price_known_never_zero(tmp_path: Path) -> None:
    prices = Prices(rows={"anthropic": {"input_per_1k": 1.0, "output_per_1k": 2.0}})
    used = {"prompt_tokens": 1500, "completion_tokens": 500, "cache_write_tokens": 1000}
    written = spend_record("text", used, model="m")
    assert written["input_tokens"] == 500  # the uncached input only
    assert spend_cost(prices, "anthropic", written) is None  # no cache_write rate
    read = spend_record("text", {"prompt_tokens": 1500, "completion_tokens": 500,
                                  "cache_read_tokens": 1000}, model="m")  # fmt: skip
    assert spend_cost(prices, "anthropic", read) == pytest.approx(0.5 + 1.0 + 1.0)
    assert spend_cost(prices, "openai", read) is None  # no row at all
    assert spend_cost(prices, "fake", read) == 0.0  # free unless priced
    silent = spend_record("text", {}, model="m")
    assert spend_cost(prices, "anthropic", silent) is None  # no usage reported


def test_a_call_by_batch_is_priced_at_the_batch_rate() -> None:
    # The hook batch mode uses: a call answered by a batch is journaled with batch: true.
    prices = Prices(rows={"openai": {"input_per_1k": 1.0, "output_per_1k": 2.0, "image": 0.04}})
    used = {"prompt_tokens": 1000, "completion_tokens": 1000}
    direct = spend_cost(prices, "openai", spend_record("text", used, model="m"))
    batched = spend_cost(prices, "openai", spend_record("text", used, model="m", batch=True))
    assert direct == pytest.approx(3.0) and batched == pytest.approx(1.5)
    image = spend_record("image", {}, model="gpt-image-1", batch=True, size=(1024, 1024))
    assert spend_cost(prices, "openai", image) == pytest.approx(0.02)
    prices.rows["openai"]["batch_factor"] = 0.6
    assert spend_cost(prices, "openai", image) == pytest.approx(0.024)


LONG = """\
runner: 1
name: long
params:
  items: {type: array, default: ["a", "b", "c", "d", "e"]}
steps:
  say:
    uses: llm
    for_each: "${{ params.items }}"
    concurrency: 1
    with:
      prompt: "WORDS ${{ item }}"
    check:
      - "${{ output.text | length > 0 }}"
""".replace("WORDS", ("x " * 400).strip())
# Prompts of one-letter words: 801 characters, which the plan (characters / 4) takes for 201
# tokens (0.201 USD at 1 per 1k input tokens), and the double counts as 401 (0.401): real spend
# is twice the estimate. Output is free here, so max_tokens plays no part.
INPUT_ONLY = "input_per_1k = 1.0\noutput_per_1k = 0"


def _input_priced(root: Path) -> None:
    toml = (root / "runner.toml").read_text(encoding="utf-8")
    old = f"input_per_1k = {RATES['input']}\noutput_per_1k = {RATES['output']}"
    (root / "runner.toml").write_text(toml.replace(old, INPUT_ONLY), encoding="utf-8")


def test_a_run_crossing_max_cost_stops_before_the_crossing_call(tmp_path: Path) -> None:
    # The plan estimates 5 x 0.201 = 1.005, within --max-cost 1.3; each call really costs 0.401.
    # After three calls 1.203 is spent, and 1.203 + 0.201 (the fourth's worst case) > 1.3: the
    # fourth is not sent, and spend stays within the budget.
    with AnthropicServer(api_key=KEY) as server:
        _project(tmp_path, server.url, LONG)
        _input_priced(tmp_path)
        plan = json.loads(_runner(tmp_path, "plan", "pipeline.yaml", "--json").stdout)
        assert plan["cost"]["total"] == pytest.approx(1.005)
        stopped = _runner(tmp_path, "apply", "pipeline.yaml", "--max-cost", "1.3")
        assert stopped.returncode == 9, stopped.stdout + stopped.stderr
        assert server.billed == 3
        said = stopped.stdout + stopped.stderr
        assert "budget 1.3 USD (--max-cost) reached: this run spent 1.203 USD" in said, said
        assert "it was not sent" in said
        runs = json.loads(_runner(tmp_path, "runs", "list", "--json").stdout)
        first = runs["runs"][0] if isinstance(runs, dict) else runs[0]
        assert first["status"] == "interrupted"
        spent = json.loads(_runner(tmp_path, "costs", "--json").stdout)["total"]["cost"]
        assert spent == pytest.approx(1.203) and spent <= 1.3
        # Raised, the next apply goes on: only the two calls not made are sent.
        resumed = _runner(tmp_path, "apply", "pipeline.yaml", "--max-cost", "5")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert server.billed == 5


def test_calls_answered_by_a_batch_cost_half(tmp_path: Path) -> None:
    from tests.providers.openai_batch_server import OpenAIBatchServer

    items = json.dumps([f"w{i}" for i in range(4)])
    (tmp_path / "pipeline.yaml").write_text(
        "runner: 1\nname: batched\nsteps:\n  ask:\n    uses: llm\n"
        f'    for_each: {items}\n    with:\n      prompt: "word ${{{{ item }}}}"\n'
        '      batch: true\n    check:\n      - "${{ output.text | length > 0 }}"\n',
        encoding="utf-8",
    )
    with OpenAIBatchServer(tmp_path / "double", api_key=KEY) as server:
        (tmp_path / "runner.toml").write_text(
            f'[general]\ndefault_provider = "openai"\n[providers.openai]\n'
            f'base_url = "{server.url}/v1"\nmodel = "test-chat"\napi_key_env = "TEST_OPENAI_KEY"\n'
            'timeout = 10\nbatch_wait = 30\n[prices]\ncurrency = "USD"\n'
            '[prices."openai/test-chat"]\ninput_per_1k = 1.0\noutput_per_1k = 2.0\n',
            encoding="utf-8",
        )
        env = {k: v for k, v in os.environ.items() if k != "RUNNER_STATE"}
        env.update(NO_COLOR="1", TEST_OPENAI_KEY=KEY)
        done = subprocess.run(
            [*runner_bin(), "apply", "pipeline.yaml"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert len(server.batches()) == 1
    doc = json.loads(_runner(tmp_path, "costs", "--json").stdout)
    # The double reports 11 prompt and 3 completion tokens a reply: 0.017 direct, half by batch.
    assert doc["total"]["batch_calls"] == 4 and doc["total"]["calls"] == 4
    assert doc["total"]["input_tokens"] == 44 and doc["total"]["output_tokens"] == 12
    assert doc["total"]["cost"] == pytest.approx(4 * 0.017 * 0.5)
    assert doc["by_run"][0]["estimate"] is not None


def test_calls_in_flight_count_at_their_worst_case() -> None:
    from runner.providers.spendguard import Budget, OverSpend, SpendGuard

    prices = Prices(rows={"p": {"image": 1.0}}, currency="USD")
    stops: list[str] = []
    guard = SpendGuard(prices, [Budget(2.5, "--max-cost")], on_stop=stops.append)
    first = guard.reserve("p", "m", "image")
    second = guard.reserve("p", "m", "image")
    with pytest.raises(OverSpend, match=r"not sent: budget 2.5 USD \(--max-cost\) reached"):
        guard.reserve("p", "m", "image")  # 2 in flight + 1 > 2.5, though nothing is spent yet
    [why] = stops
    assert "this run spent 0 USD, 2 USD in flight, and the next call may cost 1 USD" in why
    guard.settle(first, None)  # failed before any work: released, nothing spent
    guard.settle(second, None, maybe_executed=True)  # its reply was lost: counted at its worst
    assert guard.spent == 1.0 and guard.in_flight == 0.0
    with pytest.raises(OverSpend):
        guard.reserve("p", "m", "image")  # the run stopped: no call goes out any more
    unpriced = SpendGuard(prices, [Budget(0.5, "x")]).reserve("q", "m", "image")
    assert unpriced.worst is None  # no price known: not bounded (the plan says so)


def test_a_daily_budget_counts_what_earlier_runs_spent(tmp_path: Path) -> None:
    # Each call really costs 0.401 (estimated 0.201). The first apply spends 5 x 0.401 = 2.005
    # today; with max_cost_per_day = 2.5 the second apply sends one call (2.005 + 0.201 <= 2.5)
    # and stops before its second (2.406 + 0.201 > 2.5).
    with AnthropicServer(api_key=KEY) as server:
        _project(tmp_path, server.url, LONG)
        _input_priced(tmp_path)
        assert _runner(tmp_path, "apply", "pipeline.yaml").returncode == 0
        assert server.billed == 5
        with (tmp_path / "runner.toml").open("a", encoding="utf-8") as f:
            f.write("[budget]\nmax_cost_per_day = 2.5\n")
        (tmp_path / "pipeline.yaml").write_text(
            LONG.replace('"a", "b", "c", "d", "e"', '"f", "g", "h", "i", "j"'), encoding="utf-8"
        )
        stopped = _runner(tmp_path, "apply", "pipeline.yaml")
        assert stopped.returncode == 9, stopped.stdout + stopped.stderr
        assert server.billed == 6
        said = stopped.stdout + stopped.stderr
        assert "budget 2.5 USD (runner.toml [budget] max_cost_per_day) reached: today spent" in said


def test_a_call_whose_reply_was_lost_is_said_to_maybe_be_billed(tmp_path: Path) -> None:
    from tests.providers.servers import Reply

    with AnthropicServer(api_key=KEY) as server:
        _project(tmp_path, server.url, LONG.replace('"a", "b", "c", "d", "e"', '"a"'))
        server.queue("POST", "/v1/messages", Reply(drop=True))  # sent, and no reply came
        failed = _runner(tmp_path, "apply", "pipeline.yaml")
        assert failed.returncode != 0 and "may have completed (and billed)" in failed.stdout
    doc = json.loads(_runner(tmp_path, "costs", "--json").stdout)
    assert doc["total"]["calls"] == 0 and doc["maybe_billed_calls"] == 1
    text = _runner(tmp_path, "costs").stdout
    assert "spent: nothing" in text and "1 call(s) whose reply was lost" in text, text


IMAGES = """\
runner: 1
name: pictures
steps:
  draw:
    uses: image
    with: {prompt: "PROMPT", n: 3, size: 32x32, seed: 1}
"""


def test_a_daily_budget_stops_an_image_step_between_its_images(tmp_path: Path) -> None:
    # The fake provider priced at 1 an image: the first apply spends 3 today; with
    # max_cost_per_day = 4.5 the second apply makes one image (3 + 1 <= 4.5) and sends no other
    # (3 + 1 in flight or spent + 1 > 4.5); the plan, which knows no day, let it start.
    (tmp_path / "pipeline.yaml").write_text(IMAGES.replace("PROMPT", "a fox"), encoding="utf-8")
    (tmp_path / "runner.toml").write_text(
        '[prices]\ncurrency = "USD"\n[prices.fake]\nimage = 1.0\n', encoding="utf-8"
    )
    assert _runner(tmp_path, "apply", "pipeline.yaml").returncode == 0
    with (tmp_path / "runner.toml").open("a", encoding="utf-8") as f:
        f.write("[budget]\nmax_cost_per_day = 4.5\n")
    (tmp_path / "pipeline.yaml").write_text(IMAGES.replace("PROMPT", "an owl"), encoding="utf-8")
    stopped = _runner(tmp_path, "apply", "pipeline.yaml")
    assert stopped.returncode == 9, stopped.stdout + stopped.stderr
    assert "budget 4.5 USD (runner.toml [budget] max_cost_per_day) reached" in stopped.stdout
    doc = json.loads(_runner(tmp_path, "costs", "--json").stdout)
    assert doc["total"]["images"] == 4 and doc["total"]["cost"] == pytest.approx(4.0)


def test_the_plan_holds_a_step_without_max_tokens_to_the_providers_limit(tmp_path: Path) -> None:
    # Anthropic always sends max_tokens (the provider's, 300 here, when the step sets none): the
    # plan's estimate is held to it, not to assumed_output_tokens, so it stays an upper bound.
    _project(tmp_path, "http://127.0.0.1:9", LONG.replace('"a", "b", "c", "d", "e"', '"a"'))
    toml = (tmp_path / "runner.toml").read_text(encoding="utf-8")
    old = f"input_per_1k = {RATES['input']}\noutput_per_1k = {RATES['output']}"
    new = "input_per_1k = 0\noutput_per_1k = 1.0\nassumed_output_tokens = 5"
    (tmp_path / "runner.toml").write_text(toml.replace(old, new), encoding="utf-8")
    plan = json.loads(_runner(tmp_path, "plan", "pipeline.yaml", "--json").stdout)
    assert plan["cost"]["total"] == pytest.approx(0.3)


def test_a_call_over_a_budget_only_by_the_calls_in_flight_waits_for_them(tmp_path: Path) -> None:
    # Five calls at once, each with a worst case of 0.3 (max_tokens 300 at 1 per 1k output
    # tokens) and a real cost of 0.012 (12 words), under max_cost_per_day = 0.5: two worst cases
    # in flight would be over it, but spent + one worst case never is. Each call waits for the
    # one out before it instead of stopping the run, and all five are made.
    short = LONG.replace(("x " * 400).strip(), ("x " * 10).strip()).replace(
        "concurrency: 1", "concurrency: 5"
    )
    with AnthropicServer(api_key=KEY) as server:
        _project(tmp_path, server.url, short)
        toml = (tmp_path / "runner.toml").read_text(encoding="utf-8")
        old = f"input_per_1k = {RATES['input']}\noutput_per_1k = {RATES['output']}"
        toml = toml.replace(old, "input_per_1k = 0\noutput_per_1k = 1.0")
        (tmp_path / "runner.toml").write_text(
            toml + "[budget]\nmax_cost_per_day = 0.5\n", encoding="utf-8"
        )
        done = _runner(tmp_path, "apply", "pipeline.yaml")
        assert done.returncode == 0, done.stdout + done.stderr
        assert server.billed == 5
    spent = json.loads(_runner(tmp_path, "costs", "--json").stdout)["total"]["cost"]
    assert spent == pytest.approx(5 * 0.012)


def test_a_monthly_budget_counts_only_this_months_calls(tmp_path: Path) -> None:
    import sqlite3

    from runner.engine.run.spend import period_starts

    # Three images at 1 each; two of them are moved to the month before. With
    # max_cost_per_month = 2.5 this month has spent 1: the next apply makes one image (1 + 1)
    # and stops before its second (2 + 1 > 2.5).
    (tmp_path / "pipeline.yaml").write_text(IMAGES.replace("PROMPT", "a fox"), encoding="utf-8")
    (tmp_path / "runner.toml").write_text(
        '[prices]\ncurrency = "USD"\n[prices.fake]\nimage = 1.0\n', encoding="utf-8"
    )
    assert _runner(tmp_path, "apply", "pipeline.yaml").returncode == 0
    last_month = period_starts()["month"] - 86400
    with sqlite3.connect(tmp_path / ".runner" / "journal.db") as db:
        keys = [r[0] for r in db.execute("SELECT key FROM calls ORDER BY key")][:2]
        db.executemany(
            "UPDATE calls SET finished_at=? WHERE key=?", [(last_month, k) for k in keys]
        )
    with (tmp_path / "runner.toml").open("a", encoding="utf-8") as f:
        f.write("[budget]\nmax_cost_per_month = 2.5\n")
    (tmp_path / "pipeline.yaml").write_text(IMAGES.replace("PROMPT", "an owl"), encoding="utf-8")
    stopped = _runner(tmp_path, "apply", "pipeline.yaml")
    assert stopped.returncode == 9, stopped.stdout + stopped.stderr
    assert "max_cost_per_month) reached: this month spent 2 USD" in stopped.stdout
    doc = json.loads(_runner(tmp_path, "costs", "--json").stdout)
    assert doc["total"]["images"] == 4 and len(doc["by_day"]) == 2
