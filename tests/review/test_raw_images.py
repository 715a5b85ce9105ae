"""An image pipeline with no `finalize` step is first-class (issue 42): its raws are its images.

`runs show` and `show` name them (the run folder holds them as read-only views, image-N.EXT)
and say they are not finals; `export` writes them; --json says which they are.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from PIL import Image

from tests.conftest import Project

POSTER = """\
    runner: 1
    name: poster
    steps:
      art:
        uses: image
        with: {prompt: "a poster of a lighthouse", n: 2, size: 512x512}
"""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_raws_are_shown_and_exported_as_the_images(project: Project) -> None:
    project.write("pipeline.yaml", POSTER)
    doc = project.apply()
    assert doc["_exit"] == 0, doc["_stderr"]
    run_id = doc["run"]["id"]
    its = doc["iterations"]
    assert [(i["image"], i["final_path"]) for i in its] == [("raw", None), ("raw", None)]
    folder = project.root / ".runner" / "runs" / run_id
    for it in its:  # each image is in the run folder, a view of its raw in the store
        path = Path(it["image_path"])
        assert path == folder / f"image-{it['ordinal']}.png"
        assert _sha(path) == it["assets"]["raw"]
        with Image.open(path) as im:
            assert im.size == (512, 512)

    for command in ("runs", "show"), ("show",):
        shown = project.cli(*command, run_id)
        assert shown.exit_code == 0, shown.stderr
        assert f"Files      .runner/runs/{run_id}/" in shown.stdout
        assert "no finalize step finalised them" in shown.stdout
    text = project.cli("show", run_id).stdout
    assert f".runner/runs/{run_id}/image-1.png" in text
    assert f".runner/runs/{run_id}/image-2.png" in text
    assert f"Contact sheet: .runner/runs/{run_id}/contact-sheet.png" in text

    exported = project.cli("export", run_id, "--to", "out", "--json")
    assert exported.exit_code == 0, exported.stderr
    assert exported.json["images"] == "raw"
    files = [Path(f) for f in exported.json["files"]]
    assert [f.name for f in files] == ["poster-1.png", "poster-2.png"]
    assert [_sha(project.root / "out" / f.name) for f in files] == [
        i["assets"]["raw"] for i in its
    ]
    said = project.cli("export", run_id, "--to", "again")
    assert said.exit_code == 0
    assert said.stdout.splitlines() == ["wrote again/poster-1.png", "wrote again/poster-2.png"]
