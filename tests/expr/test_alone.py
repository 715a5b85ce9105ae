"""A command holding a secret runs with no other confined command beside it (expr/alone.py):
the others run side by side, it waits for them, and a steady stream of them cannot keep it
waiting for ever."""

from __future__ import annotations

import asyncio

from runner.expr.alone import Alone


def test_shared_commands_overlap_and_one_holding_a_secret_runs_alone() -> None:
    gate = Alone()
    running: list[str] = []
    seen: list[tuple[str, ...]] = []

    async def command(name: str, alone: bool, start: float, length: float) -> None:
        await asyncio.sleep(start)
        await gate.enter(alone)
        running.append(name)
        seen.append(tuple(sorted(running)))
        await asyncio.sleep(length)
        running.remove(name)
        gate.leave(alone)

    async def main() -> None:
        # a stream of shared commands, each starting before the last ends; the secret
        # holder arrives in the middle of it
        stream = [command(f"s{i}", False, 0.02 * i, 0.05) for i in range(15)]
        await asyncio.gather(*stream, command("secret", True, 0.03, 0.05))

    asyncio.run(main())
    assert ("secret",) in seen  # it ran, alone
    assert all(len(s) == 1 for s in seen if "secret" in s)
    assert any(len(s) > 1 for s in seen)  # the others did run side by side
    before = seen.index(("secret",))
    assert before < len(seen) - 1, "the stream of shared commands kept it waiting to the end"
