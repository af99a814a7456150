"""A resumable JSONL results file: one line per finished task, keyed, appended and fsynced as it finishes.

The file is held under an exclusive lock while open. A truncated last line (a run killed mid-write) is cut
off on open, so the file only ever holds complete lines; ``keys`` are the tasks already done, which a
resumed run skips. A character device (``/dev/null``) or a FIFO with a reader is written through, with
nothing to resume; a directory, a block device, a socket or a FIFO with no reader is refused at once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from p2smt.errors import P2Error
from p2smt.model.paths import kind_of, open_through, through_target, write_all


def _parse_lines(path: Path, data: bytes, marker: str | None = None, hint: str = "remove it to resume"
                 ) -> tuple[list[dict[str, Any]], int]:
    """Complete result lines and the byte length they span (a truncated last line is left out); with
    ``marker``, a line without that field belongs to another kind of results file and is refused."""
    end = data.rfind(b"\n") + 1
    rows = []
    for n, raw in enumerate(data[:end].split(b"\n")[:-1], 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise P2Error(f"{path}:{n}: not a result line (invalid JSON); {hint}") from None
        if not isinstance(row, dict) or not isinstance(row.get("key"), str):
            raise P2Error(f"{path}:{n}: not a result line (no 'key')")
        if marker is not None and marker not in row:
            raise P2Error(f"{path}:{n}: a line of another kind of results file (no {marker!r}); give another file")
        rows.append(row)
    tail = data[end:].lstrip(b" \t\r\n\x00")  # a crash can leave zero bytes where the line was being written
    if tail and not tail.startswith(b"{"):  # a killed write leaves the start of a JSON object, not other text
        line = data.count(b"\n") + 1
        raise P2Error(f"{path}:{line}: not a result line (no JSON object begins there); give another file")
    return rows, end


def _read_all(fd: int) -> bytes:
    """Every byte of the open file ``fd``, from its start."""
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The complete lines of a results file in file order ([] if it does not exist)."""
    p = Path(path)
    if not os.path.lexists(p) or kind_of(os.stat(p).st_mode) is not None:  # a FIFO or a device: nothing kept
        return []
    try:
        data = p.read_bytes()
    except OSError as err:
        raise P2Error(f"cannot read {p}: {err.strerror}") from None
    return _parse_lines(p, data)[0]


class ResultStore:
    """The results file opened for appending; ``fresh`` empties it first, otherwise its lines are kept.
    ``marker``: a field every line of this kind of file has (``task`` for sweeps, ``variant`` for
    experiments); a file holding other lines is refused before anything is emptied or appended.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "r.jsonl"
    >>> with ResultStore(path) as store:
    ...     store.append({"key": "a", "x": 1})
    >>> with ResultStore(path) as store:
    ...     sorted(store.keys), store.rows[0]["x"]
    (['a'], 1)
    """

    def __init__(self, path: str | Path, *, fresh: bool = False, marker: str | None = None) -> None:
        self.path = Path(path)
        self.through = through_target(self.path, "results file")
        if self.through:
            self.fd, self.rows, self.keys = open_through(self.path, "results file"), [], set()
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, 0o644)
        except OSError as err:
            raise P2Error(f"cannot write {self.path}: {err.strerror}") from None
        try:
            if (kind := kind_of(os.fstat(self.fd).st_mode)) is not None:  # made a FIFO since it was looked at
                raise P2Error(f"results file {str(self.path)!r} is {kind}, not a regular file")
            self._lock()
            data = _read_all(self.fd)
            # read even when fresh: a file that is not this kind of results file is never emptied
            self.rows, end = _parse_lines(self.path, data, marker,
                                          "give another file, or delete it" if fresh else "remove it to resume")
            if fresh:
                os.ftruncate(self.fd, 0)
                data, self.rows, end = b"", [], 0
        except BaseException:
            os.close(self.fd)
            raise
        if end < len(data):
            os.ftruncate(self.fd, end)
        self.keys = {r["key"] for r in self.rows}
        os.lseek(self.fd, 0, os.SEEK_END)

    def _lock(self) -> None:
        try:
            import fcntl
        except ImportError:  # not on POSIX: no lock
            return
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise P2Error(f"{self.path} is being written by another run") from None

    def append(self, row: Mapping[str, Any]) -> None:
        """Write ``row`` (it needs a string ``key``) as one line and fsync it."""
        data = (json.dumps(row, sort_keys=True, allow_nan=False, default=str) + "\n").encode("utf-8")
        write_all(self.fd, data)
        if not self.through:
            os.fsync(self.fd)
        self.keys.add(row["key"])
        self.rows.append(dict(row))

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
