"""Benchmark: median time to build and hash one RenderPromptCard (target: under 200 µs).

Run: python bench/bench_cards.py [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from runner.steps.cards import build_card, card_hash, load_spec

REPO = Path(__file__).resolve().parent.parent
TARGET_US = 200.0


def inputs(i: int) -> dict[str, Any]:
    """A realistic shot: two characters, a background, continuity data (varied per round)."""
    return {
        "scene_index": 12,
        "shot_index": i,
        "shot": {"camera_direction": "medium shot of the doorway", "primary_subject": "observer"},
        "staging": {"camera_direction": "medium shot of the doorway", "lighting_mood": "차가운 빛"},
        "perception_mode": None,
        "visible_entities": ["C02", "C01", "L01"],
        "outlook_pairs": [
            {"character_id": "C02", "outlook_id": "O01"},
            {"character_id": "C01", "outlook_id": "O02"},
        ],
        "background_mode_on": True,
        "bg_id": "cb_main_room",
        "bg_owned": ["window", "door", "TV"],
        "bg_camera_meta": {"camera_position": "southeast doorway", "lens_hint": "35mm"},
        "fixed_elements": [
            {
                "element_id": "pose",
                "element_type": "character_state",
                "description": "여자가 왼쪽으로 누워 있다",
            }
        ],
        "previous_shot_refs": [
            {
                "scene_index": 12,
                "shot_index": 3,
                "ref_usage": "zoom_in_detail",
                "keep_elements": ["hand", "rug"],
            }
        ],
        "forward_zoom_targets": [
            {
                "scene_index": 12,
                "shot_index": 5 + k,
                "description": f"target {k}",
                "keep_elements": ["a", "b"],
            }
            for k in range(8)
        ],
    }


def for_each_run(shots: int) -> None:
    """Whole process: one `card` for_each over ``shots`` shots on a fresh state (target < 10 s)."""
    import json
    import shutil
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(REPO / "cards", root / "cards")
        # Data at volume is JSON (YAML construction is pure Python even with libyaml).
        (root / "shots.json").write_text(
            json.dumps({"shots": [inputs(i) for i in range(shots)]}, ensure_ascii=False),
            encoding="utf-8",
        )
        (root / "pipeline.yaml").write_text(
            "runner: 1\nname: cards\nsteps:\n"
            "  shots: {uses: read, with: {path: shots.json, as: json}}\n"
            "  card:\n    uses: card\n    for_each: '${{ steps.shots.output.data.shots }}'\n"
            "    with: {spec: cards/render_prompt_card.yaml, inputs: '${{ item }}'}\n",
            encoding="utf-8",
        )
        for label in ("cold", "no-op"):
            t0 = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-m", "runner", "apply", "pipeline.yaml", "--json", "-q"],
                cwd=root,
                capture_output=True,
                text=True,
                check=False,
            )
            wall = time.perf_counter() - t0
            doc = json.loads(out.stdout)
            print(
                f"{shots} shots' cards in one for_each, {label}: {wall:.2f} s whole process "
                f"(exit {doc['exit_code']}, card elements {doc['steps'][1].get('elements')}; "
                "target < 10 s)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument(
        "--shots",
        type=int,
        default=10_000,
        help="shots for the whole-process for_each run (0 to skip)",
    )
    options = parser.parse_args()
    rounds = options.rounds
    spec = load_spec(REPO / "cards" / "render_prompt_card.yaml")
    cases = [inputs(i) for i in range(rounds)]
    for case in cases[:50]:  # warm up (first build also compiles the one-template evaluator)
        build_card(spec, case)
    build_us, hash_us = [], []
    for case in cases:
        t0 = time.perf_counter()
        built = build_card(spec, case)
        t1 = time.perf_counter()
        card_hash(spec, built.card)
        t2 = time.perf_counter()
        build_us.append((t1 - t0) * 1e6)
        hash_us.append((t2 - t1) * 1e6)
    med = statistics.median(build_us)
    print(
        f"RenderPromptCard build+hash: median {med:.1f} µs, p90 "
        f"{statistics.quantiles(build_us, n=10)[-1]:.1f} µs over {rounds} rounds "
        f"(target < {TARGET_US:.0f} µs: {'met' if med < TARGET_US else 'NOT met'})"
    )
    print(f"re-hash of a stored card (verify path): median {statistics.median(hash_us):.1f} µs")
    if options.shots:
        for_each_run(options.shots)


if __name__ == "__main__":
    main()
