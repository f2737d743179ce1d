"""A run directory: a small database with one writer, appended one finished task at a time.

A run (the suite, the cohort) writes its output files under one directory ``DIR``
together with:

- ``progress.jsonl``: a header line ``{"journal": 2, "run": <the run's parameters>}``,
  then, after each task whose output is completely written and flushed, one *mark*:
  the number of tasks done and, per output file, its byte length and the sha256 of all
  its bytes up to that length (``{"done": 3, "records_bytes": 4210,
  "records_sha256": "..."}``);
- ``run.lock``: the lock (``lockf``) that the one run writing ``DIR`` holds, and its
  process id, so that a second run on ``DIR`` is refused with one line naming it.

An interrupted run therefore loses nothing it reported. ``--resume`` first proves that
``DIR`` holds this run's output: the same parameters, every mark in order (``done`` 1,
2, ...; lengths never shrinking and within the files) and every file's bytes up to every
mark hashing to the mark's digest. Only then does it truncate each file to the last mark
(a task cut short is dropped and run again) and continue with the next task; the files
end as those of an uninterrupted run. Any edit, swap, duplicate or foreign file before
the last mark, another run's files, output files without ``progress.jsonl``, or a
``progress.jsonl`` of an older replayverify (no digests) is refused with one line and
``DIR`` left as it was. The rules for users are in docs/run-directories.md.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path

from replayverify.untrusted import dumps, one_line

VERSION = 2  # of progress.jsonl: 2 added the digests (and the header line's form)
LOCK = "run.lock"
PROGRESS = "progress.jsonl"
_CHUNK = 1 << 20
_HELD: set[tuple[int, int]] = set()  # lock files this process holds (lockf is per process)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _digest_key(key: str) -> str:
    """The mark's digest field of the file whose length field is ``key``."""
    return key.removesuffix("_bytes") + "_sha256"


class RunLock:
    """The exclusive lock on ``DIR``: ``lockf`` on ``DIR/run.lock``, holding our pid.

    A POSIX record lock, not ``flock``: forked workers do not inherit it, so a client
    killed with SIGKILL frees ``DIR`` even while its workers are still winding down.
    Two runs of one process on one ``DIR`` are refused too (``lockf`` would let them).
    """

    def __init__(self, out: Path, error: type[Exception]) -> None:
        import fcntl

        path = out / LOCK
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise error(f"cannot write to {out}: {exc.strerror}") from None
        st = os.fstat(fd)
        self.key = (st.st_dev, st.st_ino)
        try:
            if self.key in _HELD:
                raise BlockingIOError(errno.EAGAIN, "held here")
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = ""
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                with open(path, "rb") as fh:
                    holder = fh.read(32).decode("ascii", "replace").strip()
            os.close(fd)
            if holder or exc.errno in (errno.EAGAIN, errno.EACCES):
                raise error(f"{out} is in use by another run (pid {holder or '?'}): wait for "
                            "it to end, or choose another --out") from None
            raise error(f"cannot lock {path}: {exc.strerror}") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        _HELD.add(self.key)
        self.fd: int | None = fd

    def release(self) -> None:
        if self.fd is not None:
            _HELD.discard(self.key)
            os.close(self.fd)  # (closing it releases the lock; the file stays, empty or not)
            self.fd = None


class RunJournal:
    """The output files of one run, opened for appending, its progress marks and its lock.

    ``files`` maps a progress key (``"records_bytes"``) to a file name
    (``"records.jsonl"``); ``done`` is how many tasks are already written; ``hashes`` the
    running sha256 of each file so far. Closing it releases ``DIR``.
    """

    def __init__(self, out: Path, files: dict[str, str], done: int, lock: RunLock,
                 hashes: dict[str, hashlib._Hash]) -> None:
        self.out = out
        self.files = files
        self.done = done
        self._lock = lock
        self._hashes = hashes
        self._handles = {key: open(out / name, "ab") for key, name in files.items()}
        # each file's length, kept up to date here rather than asked of the file (a
        # system call) after every task
        self._sizes = {key: fh.tell() for key, fh in self._handles.items()}
        self._progress = open(out / PROGRESS, "a", encoding="utf-8")

    def append(self, chunks: dict[str, bytes]) -> None:
        """One finished task: its bytes for each file (written, flushed), then its mark."""
        mark: dict[str, object] = {"done": self.done + 1}
        for key, fh in self._handles.items():
            chunk = chunks.get(key, b"")
            fh.write(chunk)
            fh.flush()
            self._sizes[key] += len(chunk)
            h = self._hashes[key]
            h.update(chunk)
            mark[key] = self._sizes[key]
            mark[_digest_key(key)] = h.copy().hexdigest()
        self.done += 1
        # (the one-line encoder made once: json.dumps sets one up on every call)
        self._progress.write(dumps(mark) + "\n")
        self._progress.flush()

    def close(self) -> None:
        for fh in self._handles.values():
            fh.close()
        self._handles = {}
        self._progress.close()
        self._lock.release()

    def __enter__(self) -> RunJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# The name before the run machinery moved (RunJournal: not the engines' undo journals).
Journal = RunJournal


def _count(value: object) -> bool:
    return type(value) is int and value >= 0


def _read_marks(progress: Path, files: dict[str, str], sizes: dict[str, int],
                damaged: str) -> tuple[dict, list[dict]]:
    """The header and the marks of ``progress`` checked for form and order (no hashing);
    ``damaged`` is the message for any fault."""
    try:
        text = progress.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        raise ValueError(damaged) from None
    lines = text.split("\n")
    try:
        header = json.loads(lines[0])
    except (json.JSONDecodeError, RecursionError):
        raise ValueError(damaged) from None
    if isinstance(header, dict) and "journal" not in header:
        raise ValueError(f"--resume: {progress} was written by an older replayverify (its "
                         "marks hold no digests to prove the files): choose another --out")
    if not (isinstance(header, dict) and header.get("journal") == VERSION
            and isinstance(header.get("run"), dict)):
        raise ValueError(damaged)
    try:
        marks = [json.loads(x) for x in lines[1:-1]]  # the last piece may be cut short
    except (json.JSONDecodeError, RecursionError):
        raise ValueError(damaged) from None
    last = {key: 0 for key in files}
    for i, mark in enumerate(marks, 1):
        if not (isinstance(mark, dict) and mark.get("done") == i and type(mark["done"]) is int):
            raise ValueError(damaged)
        for key in files:
            n, digest = mark.get(key), mark.get(_digest_key(key))
            if not (_count(n) and last[key] <= n <= sizes[key] and isinstance(digest, str)):
                raise ValueError(damaged)
            last[key] = n
    return header, marks


def _prove(out: Path, files: dict[str, str], marks: list[dict],
           error: type[Exception]) -> dict[str, hashlib._Hash]:
    """Hash every file up to each mark and compare; the running hashes at the last mark."""
    hashes = {}
    for key, name in files.items():
        h = hashlib.sha256()
        at = 0
        with open(out / name, "rb") as fh:
            for mark in marks:
                left = mark[key] - at
                while left:
                    chunk = fh.read(min(left, _CHUNK))
                    if not chunk:
                        break
                    h.update(chunk)
                    left -= len(chunk)
                at = mark[key]
                if h.hexdigest() != mark[_digest_key(key)]:
                    raise error(f"--resume: {out / name} is not what this run wrote (it differs "
                                f"from its record after task {mark['done']}: changed since, or "
                                "another run's): choose another --out")
        hashes[key] = h
    return hashes


def _sizes(out: Path, files: dict[str, str], error: type[Exception]) -> dict[str, int]:
    sizes = {}
    for key, name in files.items():
        path = out / name
        try:
            st = path.stat()
        except FileNotFoundError:
            sizes[key] = 0
            continue
        except OSError as exc:
            raise error(f"cannot read {path}: {exc.strerror}") from None
        if not path.is_file():
            raise error(f"{path} is not a regular file: choose another --out")
        sizes[key] = st.st_size
    return sizes


def check_dir(out: Path, error: type[Exception], option: str = "--out") -> None:
    """Whether ``out`` could be made a writable directory, asked without making anything:
    one line (``error``) if it is not a directory, its names are too long, or its nearest
    existing ancestor is not a writable directory."""
    where = f"{option} {one_line(str(out), 120)}"
    if any(len(os.fsencode(part)) > 255 for part in out.parts):
        raise error(f"{where}: File name too long")
    at = out
    try:
        while not at.exists() and not at.is_symlink() and at != at.parent:
            at = at.parent
        if not at.is_dir():
            raise error(f"{where}: not a directory" + ("" if at == out else f" ({at} is not)"))
    except OSError as exc:  # a symbolic-link loop
        raise error(f"{where}: {exc.strerror or exc}") from None
    if not os.access(at, os.W_OK | os.X_OK):
        raise error(f"{where}: not writable")


def prepare_dir(out: Path, error: type[Exception], option: str = "--out") -> None:
    """``out`` made (if missing) and checked to be a writable directory, in one line."""
    where = f"{option} {one_line(str(out), 120)}"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise error(f"{where}: not a directory") from None
    except OSError as exc:
        raise error(f"{where}: {exc.strerror or exc}") from None
    if not out.is_dir():
        raise error(f"{where}: not a directory")
    if not os.access(out, os.W_OK | os.X_OK):
        raise error(f"{where}: not writable")


def open_journal(out: Path, meta: dict, files: dict[str, str], *, resume: bool, what: str,
                 error: type[Exception] = ValueError, ends: tuple[str, ...] = ()) -> RunJournal:
    """Lock ``out`` and open it for a run with parameters ``meta``; with ``resume``, where
    it stopped.

    Refused with one line (``error``), ``out`` unchanged: another run holding ``out``;
    resuming a directory that holds a run with other parameters (``what`` names the run:
    "suite", "cohort"), a damaged or older ``progress.jsonl``, or files that differ from
    their marks; output files that no ``progress.jsonl`` accounts for (with or without
    ``resume``); starting over a directory whose ``files`` hold output without ``resume``;
    ``ends`` (the files written when the run ends: summary.json) that are not regular
    files, refused now rather than after the whole run.
    """
    prepare_dir(out, error)
    for name in ends:
        path = out / name
        if (path.exists() and not path.is_file()) or path.is_symlink():
            raise error(f"{path} is not a regular file: remove it, or choose another --out")
    lock = RunLock(out, error)
    try:
        return _open(out, meta, files, resume, what, error, lock)
    except BaseException:
        lock.release()
        raise


def _open(out: Path, meta: dict, files: dict[str, str], resume: bool, what: str,
          error: type[Exception], lock: RunLock) -> RunJournal:
    progress = out / PROGRESS
    sizes = _sizes(out, files, error)
    fresh = {key: hashlib.sha256() for key in files}
    if progress.is_symlink() or (progress.exists() and not progress.is_file()):
        raise error(f"{progress} is not a regular file: choose another --out")
    if resume and progress.exists():
        damaged = f"--resume: {progress} is damaged; choose another --out"
        try:
            header, marks = _read_marks(progress, files, sizes, damaged)
        except ValueError as exc:
            raise error(str(exc)) from None
        old = header["run"]
        if old != meta:
            diff = "; ".join(f"{k} {old.get(k)!r} there, {meta.get(k)!r} here"
                             for k in sorted(set(old) | set(meta)) if old.get(k) != meta.get(k))
            raise error(one_line(f"--resume: {out} holds a different {what} ({diff}): rerun "
                                 "it with the same options, or choose another --out", 400))
        hashes = _prove(out, files, marks, error)
        # proven: only now is anything changed
        last = marks[-1] if marks else {"done": 0}
        for key, name in files.items():
            with open(out / name, "ab") as fh:
                fh.truncate(last.get(key, 0))
        _write_atomic(progress, "".join(dumps(x) + "\n" for x in [header, *marks]))
        return RunJournal(out, files, last["done"], lock, hashes)
    for key, name in files.items():
        if sizes[key]:
            path = out / name
            if resume:
                raise error(f"--resume: {path} has no {PROGRESS} to prove it is this run's: "
                            "choose another --out")
            raise error(f"{path} exists: pass --resume to continue it, or choose "
                        "another --out")
    if not resume and progress.exists() and progress.stat().st_size:
        try:
            marked = progress.read_bytes().count(b"\n") > 1
        except OSError:
            marked = True
        if marked:
            raise error(f"{progress} exists: pass --resume to continue it, or choose "
                        "another --out")
    for name in files.values():
        (out / name).write_bytes(b"")
    _write_atomic(progress, dumps({"journal": VERSION, "run": meta}) + "\n")
    return RunJournal(out, files, 0, lock, fresh)
