"""Benchmark: batch mode's bookkeeping per element (issue 41: under 0.2 ms at 10,000).

What runner itself does for each request of a ``batch: true`` step, on a real journal in a
temporary state directory (the journal's batched commits on, as in an apply), timed phase by
phase over N requests: ``queue`` (each element asks the desk, finds nothing, is queued and told
BatchPending), ``make`` (each line's worst case held under the run's budget at the batch
price, as an apply does; the batch journaled with every line before it is made, the JSONL
built, the file id and batch id journaled), ``collect`` (the output file's lines parsed and
every answer copied into the journal in one commit) and ``answer`` (each element asks again and
gets its answer). Wall and CPU time are both printed (the CPU time of this process is
steadier on a shared machine). The service is an in-process stand-in holding the uploaded bytes and writing
the output file from them (its own time is not runner's and is printed apart); the request
bodies are real chat bodies from the OpenAI provider.

    /work/venv/bin/python bench/bench_batch.py [--n 10000] [--repeat 3] [--no-budget]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner.engine.run.batchdesk import BatchDesk
from runner.engine.run.spend import RunSpend
from runner.providers.base import ImageRequest, ImageResult, TextRequest, TextResult
from runner.providers.batchapi import BatchPending, LineResult, RemoteBatch
from runner.providers.openai import OpenAIProvider
from runner.providers.openai_batch import OpenAIBatches, _line
from runner.providers.prices import Prices
from runner.providers.spendguard import Budget, SpendGuard
from runner.state.journal import Journal


class InProcessService:
    """OpenAI's batch endpoints as one object: answers every line at once."""

    def __init__(self, api: OpenAIBatches) -> None:
        self.api = api
        self.max_requests, self.max_bytes = api.max_requests, api.max_bytes
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, RemoteBatch] = {}
        self.service_s = self.service_cpu = 0.0

    def text_body(self, request: TextRequest) -> tuple[str, dict[str, Any]]:
        return self.api.text_body(request)

    def text_result(self, body: dict[str, Any], request: TextRequest) -> TextResult:
        return self.api.text_result(body, request)

    def image_body(self, request: ImageRequest) -> tuple[str, dict[str, Any]]:
        return self.api.image_body(request)

    def image_result(self, body: dict[str, Any], request: ImageRequest) -> ImageResult:
        return self.api.image_result(body, request)

    def line(self, custom_id: str, endpoint: str, body: dict[str, Any]) -> bytes:
        return self.api.line(custom_id, endpoint, body)

    async def upload(self, name: str, data: bytes) -> str:
        self.files[name] = data
        return name

    async def find_upload(self, name: str) -> str | None:
        return name if name in self.files else None

    async def create(
        self, file_id: str, endpoint: str, tag: str, lines: Callable[[], bytes]
    ) -> RemoteBatch:
        t0, c0 = time.perf_counter(), time.process_time()
        out = []
        for raw in self.files[file_id].splitlines():
            cid = json.loads(raw)["custom_id"]
            body = {"choices": [{"message": {"content": f"echo {cid[:8]}"}}], "usage": {}}
            resp = {"status_code": 200, "request_id": "r", "body": body}
            out.append(json.dumps({"id": "b", "custom_id": cid, "response": resp, "error": None}))
        self.files[f"{tag}-out"] = "\n".join(out).encode()
        self.service_s += time.perf_counter() - t0
        self.service_cpu += time.process_time() - c0
        n = len(out)
        batch = RemoteBatch(tag, "completed", n, n, 0, None, f"{tag}-out")
        self.batches[tag] = batch
        return RemoteBatch(tag, "validating", n)

    async def find_batch(
        self, tag: str, *, since: float, total: int, known: frozenset[str]
    ) -> RemoteBatch | None:
        return self.batches.get(tag)

    async def get(self, remote_id: str) -> RemoteBatch:
        return self.batches[remote_id]

    async def results(self, batch: RemoteBatch) -> list[LineResult]:
        return [
            _line(json.loads(raw)) for raw in self.files[str(batch.output_file_id)].splitlines()
        ]

    async def cancel(self, remote_id: str) -> RemoteBatch:
        return self.batches[remote_id]


def budget() -> RunSpend:
    """A run's spend with a price for the model and a budget every line fits in."""
    prices = Prices(rows={"openai/gpt-4o-mini": {"input_per_1k": 1.0, "output_per_1k": 2.0}})
    return RunSpend(SpendGuard(prices, [Budget(1e9, "--max-cost")]), lambda _name: {})


async def one_round(n: int, *, with_budget: bool = True) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        journal = Journal.open(Path(tmp) / "state", new=True)
        journal.batch_commits()
        provider = OpenAIProvider(settings={"batch_wait": 1}, secrets={"api_key": "k"})
        service = InProcessService(OpenAIBatches(provider))
        spend = budget()
        desk = BatchDesk(journal, "run-1", budget=(lambda: spend) if with_budget else None)
        requests = []
        for i in range(n):
            request = TextRequest(messages=[{"role": "user", "content": f"word {i}"}])
            request.idempotency_key = f"{i:064x}"
            requests.append(request)
        times: dict[str, float] = {}
        cpu: dict[str, float] = {}

        async def ask_all() -> list[LineResult]:
            got = []
            for request in requests:
                endpoint, body = service.text_body(request)
                with contextlib.suppress(BatchPending):  # (queued, or waiting: not answered)
                    got.append(
                        await desk.answer(
                            step_id="ask",
                            provider=provider,
                            api=service,
                            key=request.idempotency_key,
                            endpoint=endpoint,
                            body=body,
                        )
                    )
            return got

        t0, c0 = time.perf_counter(), time.process_time()
        assert await ask_all() == []
        times["queue"], cpu["queue"] = time.perf_counter() - t0, time.process_time() - c0
        t0, c0 = time.perf_counter(), time.process_time()
        await desk.flush("ask")
        times["make"] = time.perf_counter() - t0 - service.service_s
        cpu["make"] = time.process_time() - c0 - service.service_cpu
        assert not with_budget or spend.guard.in_flight > 0  # every line held
        t0, c0 = time.perf_counter(), time.process_time()
        assert await desk.settle("ask")
        times["collect"], cpu["collect"] = time.perf_counter() - t0, time.process_time() - c0
        t0, c0 = time.perf_counter(), time.process_time()
        answers = await ask_all()
        times["answer"], cpu["answer"] = time.perf_counter() - t0, time.process_time() - c0
        assert len(answers) == n and all(a.body for a in answers)
        assert spend.guard.in_flight < 1e-9  # every hold released as its answer came back
        journal.end_batch()
        journal.close()
        times["service (not runner's)"] = service.service_s
        cpu["service (not runner's)"] = service.service_cpu
        return {**times, **{f"cpu:{k}": v for k, v in cpu.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-budget", action="store_true", help="No budget held per line.")
    args = parser.parse_args()
    rounds = []
    for r in range(args.repeat):
        print(f"round {r + 1} of {args.repeat}", file=sys.stderr)
        rounds.append(asyncio.run(one_round(args.n, with_budget=not args.no_budget)))
    print(f"batch bookkeeping, {args.n:,} requests, median of {args.repeat}")
    print(f"{'phase':<24}{'wall s':>10}{'ms/element':>12}{'cpu ms/element':>16}")
    total = total_cpu = 0.0
    for phase in [p for p in rounds[0] if not p.startswith("cpu:")]:
        s = statistics.median(r[phase] for r in rounds)
        c = statistics.median(r[f"cpu:{phase}"] for r in rounds)
        if not phase.startswith("service"):
            total, total_cpu = total + s, total_cpu + c
        print(f"{phase:<24}{s:>10.3f}{s / args.n * 1000:>12.4f}{c / args.n * 1000:>16.4f}")
    per, per_cpu = total / args.n * 1000, total_cpu / args.n * 1000
    print(f"{'runner total':<24}{total:>10.3f}{per:>12.4f}{per_cpu:>16.4f}  (target < 0.2 ms)")


if __name__ == "__main__":
    main()
