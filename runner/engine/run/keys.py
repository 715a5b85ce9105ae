"""The cache key: one function builds it from named parts (see design/overview.md).

key = sha256(canonical JSON of the parts). Nothing that cannot change the output (retries,
timeout, concurrency, descriptions) is a part.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from json.encoder import encode_basestring
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import StepFailure
from ...source.beneath import OutsideRoot
from ...source.regularfile import NotRegularFile
from ...state.canonical import CanonicalError, canonical_json, sha256_hex, utf8

if TYPE_CHECKING:
    from ...pipeline.compiler import CompiledStep
    from ...steps.base import StepEnv
    from .files import FileHasher


@dataclass(frozen=True)
class KeyParts:
    """What a step's cache key is made of, each part named."""

    step_type: str
    type_version: str
    args: Any
    files: dict[str, str]
    extra: dict[str, Any]
    version: str | None
    item: Any = None
    has_item: bool = False
    # Of ``files``, those a body of a type with ``records_reads`` recorded reading (not predicted
    # by ``reads()``); None: a type that records nothing. Not a part of its own: the files are.
    recorded: tuple[str, ...] | None = None

    def predicted(self) -> dict[str, str]:
        """``files`` less the recorded reads: what ``reads()`` and the checks named."""
        if not self.recorded:
            return self.files
        return {k: v for k, v in self.files.items() if k not in self.recorded}

    def base(self) -> str:
        """The key of every part but the recorded reads: what finds, in the journal, the files
        the last execution with these parts read (engine/run/recorded.py)."""
        if not self.recorded:
            return self.key()
        return _refiled(self, self.predicted(), None).key()

    def identity(self) -> str | None:
        """What a for_each element is: its item's digest, as ``summary`` journals it (None
        outside a for_each). A user edit follows it (state/overrides.py)."""
        if not self.has_item:
            return None
        return sha256_hex(utf8(self._canonical_parts()["item"]))

    def as_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "type": self.step_type,
            "type_version": self.type_version,
            "args": self.args,
            "files": self.files,
            "extra": self.extra,
            "version": self.version,
        }
        if self.has_item:
            doc["item"] = self.item
        return doc

    def _canonical_parts(self) -> dict[str, str]:
        # Each part's canonical text, computed once: the key and the summary share them.
        cached: dict[str, str] | None = self.__dict__.get("_parts")
        if cached is None:
            try:
                cached = {name: _canonical(value) for name, value in self.as_document().items()}
            except CanonicalError:
                canonical_json(self.as_document())  # raises, naming the place in the document
                raise
            object.__setattr__(self, "_parts", cached)
        return cached

    def key(self) -> str:
        """sha256 of the canonical JSON of the parts document, joined from the parts' canonical
        texts: with sorted keys and fixed separators that gives exactly
        canonical_json(as_document()) (a test asserts the equality). Only the arguments and
        the element are real encodings, and an execution that runs journals the parts'
        digests (``summary``) from the same texts (it encoded every part again: 1/6 of a
        for_each element's time)."""
        parts = self._canonical_parts()
        text = "{" + ",".join(f'"{name}":{parts[name]}' for name in _ORDER if name in parts) + "}"
        return sha256_hex(utf8(text))

    def summary(self) -> dict[str, Any]:
        """Per-part digests, journaled so `explain` can say which part changed."""
        parts = self._canonical_parts()
        # The checks apart from the other extra parts, so `explain` can say which changed.
        checks = self.extra.get("checks") if isinstance(self.extra, dict) else None
        extra = parts["extra"]
        if checks is not None:
            extra = canonical_json({k: v for k, v in self.extra.items() if k != "checks"})
        return {
            "type": f"{self.step_type}@{self.type_version}",
            "args": sha256_hex(utf8(parts["args"])),
            "files": dict(self.files),
            "extra": _EMPTY_DIGEST if extra == "{}" else sha256_hex(utf8(extra)),
            "version": self.version,
            **({"checks": sha256_hex(utf8(canonical_json(checks)))} if checks is not None else {}),
            **({"item": sha256_hex(utf8(parts["item"]))} if self.has_item else {}),
            # journaled so the next apply finds which files the body read (recorded.py)
            **(
                {"base": self.base(), "recorded": list(self.recorded)}
                if self.recorded is not None
                else {}
            ),
        }


# The parts document's names in canonical (sorted) order.
_ORDER = ("args", "extra", "files", "item", "type", "type_version", "version")
_EMPTY_DIGEST = sha256_hex(b"{}")


def identities(items: list[Any]) -> frozenset[str]:
    """The identities (``KeyParts.identity``) of a for_each's items; an item no key can hold
    has none (its element fails before any edit is looked for)."""
    out = set()
    for item in items:
        try:
            out.add(sha256_hex(utf8(_canonical(item))))
        except CanonicalError:
            continue
    return frozenset(out)


def _canonical(value: Any) -> str:
    """canonical_json(value), without the walk for the parts that are almost always a name, a
    version, nothing or an empty mapping."""
    if type(value) is str:
        return encode_basestring(value)
    if value is None:
        return "null"
    if type(value) is dict and not value:
        return "{}"
    return canonical_json(value)


def resolve(
    step: CompiledStep,
    context: Mapping[str, Any],
    root: Path,
    hasher: FileHasher,
    env: StepEnv,
    review: dict[str, Any] | None = None,
    item: Any = None,
    has_item: bool = False,
    recorded: Callable[[str], tuple[str, ...] | None] | None = None,
) -> tuple[dict[str, Any], KeyParts]:
    """A step's arguments evaluated in ``context`` and its key's parts: the files it reads
    (hashed through ``hasher``), its type's extra parts, and a revision's review; for a type
    whose body records its reads, the files ``recorded`` (base key -> names) says the last
    execution with the same other parts read, as they are now. Raises StepFailure for a
    missing input, ExpressionError for an argument that cannot be evaluated."""
    args = step.type.evaluate(step.args, context)
    files: dict[str, str] = {}
    for rel in step.type.reads(args, root=root):
        try:
            files[rel] = hasher.hash(root / rel, root=root)  # as opened now, beneath root
        except FileNotFoundError:
            raise StepFailure(f"input file {rel} does not exist") from None
        except (OutsideRoot, NotRegularFile) as exc:
            raise StepFailure(f"input file {rel}: {exc.strerror}") from None
    key_extra = step.type.key_extra(args, env)
    if step.checks:  # a result that passed other checks is not what a run now would give
        key_extra = {**key_extra, "checks": [rule.fingerprint() for rule in step.checks]}
        _hash_check_files(step, root, hasher, files)
    if review is not None:  # a revision is an input: it and its downstream re-run
        key_extra = {**key_extra, "review": review}
    neutral = step.type.key_neutral
    keyed = {k: v for k, v in args.items() if k not in neutral} if neutral else args
    parts = KeyParts(
        step.uses, step.type.version, keyed, files, key_extra, step.version, item, has_item
    )
    if step.type.records_reads and recorded is not None:
        try:
            names = recorded(parts.key())
        except CanonicalError:  # arguments no key can hold (a plan's unknowns): the caller's
            return args, parts  # own parts.key() raises it where it is handled
        parts = with_reads(parts, root, hasher, {n: None for n in names or ()})
    return args, parts


def with_reads(
    parts: KeyParts, root: Path, hasher: FileHasher, reads: Mapping[str, str | None]
) -> KeyParts:
    """``parts`` (of a type whose body records its reads) with ``reads`` as its recorded
    files: each name with the digest given (what the body read), or hashed now (None); one
    missing now keys as the loader records a template not found, so a key made of reads
    recorded and one predicted from them agree."""
    from ...expr.templates import ABSENT  # a template step's: jinja2 is loaded for it anyway

    static = parts.predicted()
    files = dict(static)
    names: list[str] = []
    for rel, digest in sorted(reads.items()):
        if rel in static:
            continue  # predicted already (a change while the body ran: hasher.changed says so)
        if digest is None:
            try:
                digest = hasher.hash(root / rel, root=root)
            except FileNotFoundError:
                digest = ABSENT
                hasher.absent(root / rel, ABSENT)
            except (OutsideRoot, NotRegularFile):
                digest = "refused"  # the loader refuses it: no execution completed with it
        files[rel] = digest
        names.append(rel)
    return _refiled(parts, files, tuple(names))


def _refiled(parts: KeyParts, files: dict[str, str], recorded: tuple[str, ...] | None) -> KeyParts:
    """``parts`` with other files, the other parts' canonical texts carried over: a key of
    recorded reads is computed twice (base, then full), and encoding the arguments again cost
    a cached for_each element as much as the rest of its lookup."""
    new = replace(parts, files=files, recorded=recorded)
    cached: dict[str, str] | None = parts.__dict__.get("_parts")
    if cached is not None:
        object.__setattr__(new, "_parts", {**cached, "files": _canonical(files)})
    return new


def _hash_check_files(
    step: CompiledStep, root: Path, hasher: FileHasher, files: dict[str, str]
) -> None:
    """The files the step's checks read (a schema file, an exec check's script and declared
    inputs) into ``files``: hashed through the same hasher as the body's inputs, so the no-op
    fingerprint, which lists every file hashed, can never miss one a key names."""
    for rule in step.checks:
        for rel, required in rule.files().items():
            if rel in files:
                continue
            try:
                files[rel] = hasher.hash(root / rel, root=root)
            except FileNotFoundError:
                if required:
                    raise StepFailure(f"input file {rel} of a check does not exist") from None
            except (OutsideRoot, NotRegularFile) as exc:
                if required:
                    raise StepFailure(f"input file {rel} of a check: {exc.strerror}") from None


def changed_parts(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """The parts that differ, most specific first (file paths by name), each with its old and
    new digest (12 hex) so a user can tell which value changed."""
    if old is None:
        return ["never ran"]
    out: list[str] = []
    if old.get("type") != new.get("type"):
        out.append(f"step type changed ({old.get('type')} -> {new.get('type')})")
    if old.get("version") != new.get("version"):
        out.append(f"version changed ({old.get('version')!r} -> {new.get('version')!r})")
    if old.get("args") != new.get("args"):
        out.append(f"arguments changed{_digests(old.get('args'), new.get('args'))}")
    old_files, new_files = old.get("files") or {}, new.get("files") or {}
    for path in sorted(set(old_files) | set(new_files)):
        if path not in old_files:
            out.append(f"new input {path}")
        elif path not in new_files:
            out.append(f"input {path} no longer read")
        elif old_files[path] != new_files[path]:
            out.append(f"input {path} changed{_digests(old_files[path], new_files[path])}")
    if old.get("extra") != new.get("extra"):
        out.append(
            f"provider profile or settings changed{_digests(old.get('extra'), new.get('extra'))}"
        )
    if old.get("checks") != new.get("checks"):
        out.append(f"checks changed{_digests(old.get('checks'), new.get('checks'))}")
    if old.get("item") != new.get("item"):
        out.append(f"element changed{_digests(old.get('item'), new.get('item'))}")
    return out


def _digests(old: Any, new: Any) -> str:
    if isinstance(old, str) and isinstance(new, str):
        return f" ({old[:12]} -> {new[:12]})"
    return ""
