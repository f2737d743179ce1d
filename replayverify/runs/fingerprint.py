"""What code made a run: a digest of replayverify's own source files.

One digest for every runner: the executors tag each task with :func:`source_fingerprint`
(a worker running other code refuses it), and ``replayverify evaluate`` records
:func:`source_sha256` of the files that define the study.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from pathlib import Path

from replayverify._version import __version__

ROOT = Path(__file__).resolve().parents[1]  # the replayverify package directory


def source_sha256(parts: Sequence[str] = ("",)) -> str:
    """sha256 over the package's ``.py`` files under ``parts`` (package-relative files or
    directories; the default: all of them), in sorted order, each as its relative path
    and its bytes."""
    h = hashlib.sha256()
    for rel in parts:
        path = ROOT / rel
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for f in files:
            h.update(f.relative_to(ROOT).as_posix().encode() + b"\0")
            h.update(f.read_bytes() + b"\0")
    return h.hexdigest()


@functools.cache
def source_fingerprint() -> str:
    """``<version>+<sha256 of the package's .py files>``: equal only for the same code."""
    return f"{__version__}+{source_sha256()[:12]}"
