"""Benchmark: median time to build and hash one RenderPromptCard (target: under 200 µs).

Run: python bench/bench_cards.py [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from runner.cards import build_card, card_hash, load_spec

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2000)
    rounds = parser.parse_args().rounds
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


if __name__ == "__main__":
    main()
