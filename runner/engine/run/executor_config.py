"""``[executor]`` in runner.toml: where step bodies run unless the command line says otherwise.

```toml
[executor]
kind = "dask"                        # "local" (the default) or "dask"
workers = 4                          # a LocalCluster of 4 worker processes ...
threads = 2                          # ... with 2 threads each
# scheduler = "tcp://10.0.0.5:8786"  # or an existing cluster (then workers/threads are its own)
```

``apply --executor/--workers/--threads/--scheduler`` win over the file, key by key.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...errors import Location, UsageError
from ...source.tomlfile import find_runner_toml, toml_location

KINDS = ("local", "dask")
KEYS = ("kind", "workers", "threads", "scheduler")


@dataclass(frozen=True)
class ExecutorSettings:
    """Where step bodies run (`[executor]` in runner.toml, or the apply's options)."""

    kind: str = "local"
    workers: int | None = None  # LocalCluster worker processes (2 when unset)
    threads: int | None = None  # threads per LocalCluster worker (1 when unset)
    scheduler: str | None = None  # an existing cluster's scheduler address

    def overridden(
        self,
        kind: str | None,
        workers: int | None,
        threads: int | None,
        scheduler: str | None,
    ) -> ExecutorSettings:
        """These settings with what the command line gave on top. A command-line kind of
        ``local`` drops the file's cluster settings with it; a cluster option without a kind
        anywhere is a mistake (UsageError)."""
        out = replace(
            self,
            workers=workers if workers is not None else self.workers,
            threads=threads if threads is not None else self.threads,
            scheduler=scheduler if scheduler is not None else self.scheduler,
        )
        if kind is not None:
            out = replace(out, kind=kind)
            if kind == "local":
                if workers or threads or scheduler:
                    raise UsageError("--scheduler, --workers and --threads go with --executor dask")
                out = ExecutorSettings()
        elif out.kind != "dask" and (workers or threads or scheduler):
            raise UsageError(
                "--scheduler, --workers and --threads go with --executor dask",
                hint='add --executor dask, or kind = "dask" under [executor] in runner.toml',
            )
        if out.scheduler and (workers or threads):
            raise UsageError("--workers and --threads start a local cluster: not with --scheduler")
        return out


class ExecutorConfigError(UsageError):
    """A bad [executor] table (exit 2), placed at file:line:column."""


def read_executor_settings(start: Path) -> ExecutorSettings:
    """``[executor]`` of the nearest runner.toml above ``start`` (none: local). The file is
    parsed only when it mentions the table: every apply calls this."""
    path = find_runner_toml(start)
    if path is None:
        return ExecutorSettings()
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ExecutorSettings()  # the provider config reports an unreadable file
    if "executor" not in text:
        return ExecutorSettings()
    import tomllib  # only for a file that mentions the table

    try:
        section = tomllib.loads(text).get("executor")
    except tomllib.TOMLDecodeError as exc:
        raise ExecutorConfigError(f"not valid TOML: {exc}", where=Location(str(path))) from None
    if section is None:
        return ExecutorSettings()
    return parse_executor_section(section, str(path), text)


def parse_executor_section(section: Any, path: str, text: str) -> ExecutorSettings:
    def where(key: str | None = None, *, at_value: bool = True) -> Location:
        return toml_location(path, text, "executor", key, at_value=at_value)

    if not isinstance(section, dict):
        raise ExecutorConfigError("[executor] must be a table", where=where())
    for key in section:
        if key not in KEYS:
            raise ExecutorConfigError(
                f"[executor] has an unknown key '{key}'",
                where=where(key, at_value=False),
                hint=f"[executor] accepts {', '.join(KEYS)}",
            )
    kind = section.get("kind", "local")
    if kind not in KINDS:
        raise ExecutorConfigError(
            f"[executor] kind must be one of {', '.join(KINDS)}", where=where("kind")
        )
    counts: dict[str, int | None] = {}
    for key in ("workers", "threads"):
        value = section.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ExecutorConfigError(
                f"[executor] {key} must be a whole number of at least 1", where=where(key)
            )
        if value is not None and value < 1:
            raise ExecutorConfigError(f"[executor] {key} must be at least 1", where=where(key))
        counts[key] = value
    scheduler = section.get("scheduler")
    if scheduler is not None and (
        not isinstance(scheduler, str) or "://" not in scheduler or not scheduler.strip()
    ):
        raise ExecutorConfigError(
            "[executor] scheduler must be an address like tcp://HOST:8786",
            where=where("scheduler"),
        )
    if scheduler and (counts["workers"] or counts["threads"]):
        key = "workers" if counts["workers"] else "threads"
        raise ExecutorConfigError(
            f"[executor] {key} starts a local cluster: not with scheduler", where=where(key)
        )
    return ExecutorSettings(kind, counts["workers"], counts["threads"], scheduler)
