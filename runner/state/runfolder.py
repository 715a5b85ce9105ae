"""A run's folder (runs/<run>/): read-only views of the object store, not copies.

The finals (the raws, image-N.EXT, for a pipeline with no finalize step) and the contact sheet
there are hard links to their objects (a copy, made read-only, where the file system has no hard
links), so an unchanged re-apply's new folder costs no space,
and an edit by hand cannot pass unnoticed: an editor that writes in place is refused (mode 0444)
or, run as root, damages the object itself (every read of an object hashes it), and one that
saves a new file under the name breaks the link, which ``edited`` finds.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import StoreError
from .iterations import Iteration, iterations_of

READ_ONLY = 0o444


def final_name(it: Iteration) -> str:
    return f"final-{it.ordinal}.{it.ext or 'jpg'}"


def sniff_ext(path: Path) -> str:
    """The file extension for an image's bytes (providers return PNG, JPEG, WebP or GIF)."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return "bin"
    if head.startswith(b"\x89PNG"):
        return "png"
    if head.startswith(b"\xff\xd8"):
        return "jpg"
    if head.startswith(b"GIF8"):
        return "gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    return "bin"


def view_name(state: Any, it: Iteration) -> str:
    """The name of an iteration's image in its run folder: final-N.EXT for a final; for the
    raw of a pipeline with no finalize step, image-N.EXT (its type read from its bytes)."""
    if it.final or not it.raw:
        return final_name(it)
    return f"image-{it.ordinal}.{sniff_ext(state.objects.path(it.raw))}"


def place(state: Any, digest: str, target: Path) -> None:
    """Make ``target`` a read-only view of object ``digest`` (unless it already is one)."""
    src = state.objects.path(digest)
    if _same_file(src, target):
        return
    if not state.objects.has(digest):  # missing or damaged (set aside): nothing to show
        raise StoreError(f"object {digest[:12]} is missing from the store")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    os.unlink(tmp)
    try:
        try:
            os.link(src, tmp)
        except OSError:  # no hard links here (another device, a file system without them)
            state.objects.copy_to(digest, Path(tmp))
            os.chmod(tmp, READ_ONLY)
        os.replace(tmp, target)  # a name the user replaced by hand is not kept: see edited()
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def place_file(state: Any, made: Path, target: Path) -> str:
    """Store a file runner just made (a contact sheet) and put its view at ``target``."""
    digest: str = state.objects.put_file(made)
    made.unlink(missing_ok=True)
    place(state, digest, target)
    return digest


def _same_file(a: Path, b: Path) -> bool:
    try:
        sa, sb = a.stat(), b.stat()
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _views(state: Any, run_id: str) -> Iterator[tuple[Path, str]]:
    folder = state.dir / "runs" / run_id
    for it in iterations_of(state.journal, run_id):
        if it.image:
            yield folder / view_name(state, it), it.image


def edited(state: Any, run_id: str) -> list[Path]:
    """The run folder's finals that no longer hold their recorded bytes (edited by hand).
    A missing one is not an edit: the next apply or `runner show` puts it back; nor is one
    holding another stored object: a view of an earlier iteration at that ordinal (the run's
    image step ran again, continued with other inputs), which ``refresh`` replaces."""
    out = []
    for path, digest in _views(state, run_id):
        if not path.exists():
            continue
        # Hashed even when it is the object's own link: root's editor writes through 0444,
        # and then the object is damaged too (the store sets it aside; this names the cause).
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        found = h.hexdigest()
        if found != digest and not state.objects.has(found):
            out.append(path)
    return out


def refresh(state: Any, run_id: str) -> list[Path]:
    """Put every final of the run in its folder as a view; an edited one is left in place
    and returned (the caller says so: the store keeps the original)."""
    changed = edited(state, run_id)
    for path, digest in _views(state, run_id):
        if path in changed:
            continue
        try:
            place(state, digest, path)
        except StoreError:
            continue  # a missing object: the view shows what is left
    return changed


def last_run_edits(state: Any, pipeline: str, item: str | None, *, before: str = "") -> list[Path]:
    """The hand edits in the folder of the newest run of (pipeline, item) that has iterations
    (other than ``before``): what `plan` and the next apply name."""
    rows = state.journal.query(
        "SELECT r.id FROM runs r WHERE r.pipeline=? AND r.item IS ? AND r.id != ? AND EXISTS "
        "(SELECT 1 FROM iterations i WHERE i.run_id = r.id) ORDER BY r.created_at DESC, r.id DESC "
        "LIMIT 1",
        (pipeline, item, before),
    )
    return edited(state, rows[0]["id"]) if rows else []
