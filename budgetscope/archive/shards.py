"""Sharded archives: one folder whose `shard=<id>/` subfolders are whole archives, each with its own writer.

    /shared/prod/shard=gpu-node-1/manifest.json, spans/…, requests/…   written by `collect --shard gpu-node-1`
    /shared/prod/shard=gpu-node-2/…                                     written by another collector

Nothing is coordinated between shards: each has its own manifest, lock, spool and compaction. A reader opened on
the root reads the last commit of every shard as one archive. Every span of a trace should reach the same shard:
put a load balancer that routes by trace id in front (the OpenTelemetry Collector's `loadbalancing` exporter,
`instrumentation/otel-collector/`). A trace that still reaches two shards is joined when the root is read
(split_traces.py).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from budgetscope.archive import manifest as mf
from budgetscope.archive.errors import ArchiveError

PREFIX = "shard="
_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class ShardError(ArchiveError):
    """A shard id or a sharded root that cannot be used. One line."""


def shard_path(root: str | os.PathLike, shard_id: str) -> Path:
    """The folder of shard `shard_id` under `root` (the root is created if its parent exists)."""
    root = Path(root)
    if not _ID.fullmatch(shard_id) or shard_id in (".", ".."):
        raise ShardError(f"shard id {shard_id!r}: use 1-64 letters, digits, '.', '_' or '-'")
    if root.suffix in (".duckdb", ".db") or root.is_file():
        raise ShardError(f"{root}: a sharded archive is a folder, not a single file")
    if mf.is_directory_archive(root):
        raise ShardError(f"{root} is an archive of its own; shards are written under another folder")
    if not root.exists():
        if not root.parent.is_dir():
            raise ShardError(f"cannot create {root}: folder {root.parent} does not exist")
        root.mkdir(exist_ok=True)
    return root / f"{PREFIX}{shard_id}"


def shards(root: str | os.PathLike) -> list[Path]:
    """The shard folders of a sharded root that hold an archive, by id."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.name.startswith(PREFIX) and mf.is_directory_archive(p))


def is_sharded(root: str | os.PathLike) -> bool:
    """A folder with shards and no archive of its own."""
    return not mf.is_directory_archive(Path(root)) and bool(shards(root))
