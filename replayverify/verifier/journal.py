"""Resumable output: files appended one finished task at a time, and where to go on.

A run (the suite, the cohort) writes its output files under one directory together
with ``progress.jsonl``: the run's parameters on the first line and, after each task
whose output is completely written and flushed, one line with the number of tasks done
and the byte length of every file. An interrupted run therefore loses nothing it had
reported, and ``--resume`` checks the parameters, truncates every file to the last
complete task (a line or a task cut short is dropped and run again) and continues with
the next task; the files end as those of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from replayverify.untrusted import dumps


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class Journal:
    """The output files of one run, opened for appending, and its progress marks.

    ``files`` maps a progress key (``"records_bytes"``) to a file name
    (``"records.jsonl"``); ``done`` is how many tasks are already written.
    """

    def __init__(self, out: Path, files: dict[str, str], done: int) -> None:
        self.out = out
        self.files = files
        self.done = done
        self._handles = {key: open(out / name, "ab") for key, name in files.items()}
        # each file's length, kept up to date here rather than asked of the file (a
        # system call) after every task
        self._sizes = {key: fh.tell() for key, fh in self._handles.items()}
        self._progress = open(out / "progress.jsonl", "a", encoding="utf-8")

    def append(self, chunks: dict[str, bytes]) -> None:
        """One finished task: its bytes for each file (written, flushed), then its mark."""
        for key, fh in self._handles.items():
            chunk = chunks.get(key, b"")
            fh.write(chunk)
            fh.flush()
            self._sizes[key] += len(chunk)
        self.done += 1
        mark = {"done": self.done, **self._sizes}
        # (the one-line encoder made once: json.dumps sets one up on every call)
        self._progress.write(dumps(mark) + "\n")
        self._progress.flush()

    def close(self) -> None:
        for fh in self._handles.values():
            fh.close()
        self._progress.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _count(value: object) -> bool:
    return type(value) is int and value >= 0


def _valid_mark(mark: object, sizes: dict[str, int]) -> bool:
    """A progress mark: a dict with a count ``done`` and, per output file, the byte count
    it had then, which the file must still hold (truncating past its end would pad it
    with zero bytes instead of cutting it back)."""
    return (isinstance(mark, dict) and _count(mark.get("done"))
            and all(_count(mark.get(key, 0)) and mark.get(key, 0) <= size
                    for key, size in sizes.items()))


def open_journal(out: Path, meta: dict, files: dict[str, str], *, resume: bool, what: str,
                 error: type[Exception] = ValueError) -> Journal:
    """Open ``out`` for a run with parameters ``meta``; with ``resume``, where it stopped.

    Refused with one line (``error``): resuming a directory that holds a run with other
    parameters (``what`` names the run: "suite", "cohort"), or starting over a
    directory whose ``files`` hold output without ``resume``.
    """
    out.mkdir(parents=True, exist_ok=True)
    progress = out / "progress.jsonl"
    if resume and progress.exists():
        lines = progress.read_text(encoding="utf-8").split("\n")
        try:
            old = json.loads(lines[0])
            marks = [json.loads(x) for x in lines[1:-1]]  # the last piece may be cut short
        except json.JSONDecodeError:
            old, marks = None, []
        sizes = {key: (out / name).stat().st_size if (out / name).exists() else 0
                 for key, name in files.items()}
        if not isinstance(old, dict) or not all(_valid_mark(m, sizes) for m in marks):
            raise error(f"--resume: {progress} is damaged; choose another --out")
        if old != meta:
            diff = "; ".join(f"{k} {old.get(k)!r} there, {meta.get(k)!r} here"
                             for k in sorted(set(old) | set(meta)) if old.get(k) != meta.get(k))
            raise error(f"--resume: {out} holds a different {what} ({diff}): rerun it with "
                        "the same options, or choose another --out")
        last = marks[-1] if marks else {"done": 0}
        for key, name in files.items():
            path = out / name
            path.touch()
            with open(path, "r+b") as fh:
                fh.truncate(last.get(key, 0))
        _write_atomic(progress, "".join(json.dumps(x) + "\n" for x in [meta, *marks]))
        return Journal(out, files, last["done"])
    for name in files.values():
        path = out / name
        if not resume and path.exists() and path.stat().st_size:
            raise error(f"{path} exists: pass --resume to continue it, or choose "
                        "another --out")
    for name in files.values():
        (out / name).write_bytes(b"")
    _write_atomic(progress, json.dumps(meta) + "\n")
    return Journal(out, files, 0)
