"""Files named by the user: inputs read only when they are regular files (a FIFO would block a read forever,
a device has no end), outputs written through the path the user named and never replacing what is not a
regular file.

Outputs: a regular file (or a missing one) is written whole or not at all, through a temporary file in its
own folder moved onto it (``os.replace``), keeping its mode; a symbolic link is followed and its target
written (the link stays); a character device (``/dev/null``, ``/dev/stdout``) or a FIFO that has a reader is
written through; a directory, a block device, a socket and a FIFO with no reader are refused with one line.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from p2smt.errors import P2Error

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str | None:
    """What a file of this ``st_mode`` is, in words ("a FIFO"); None for a regular file."""
    return None if stat.S_ISREG(mode) else next((w for test, w in _KINDS if test(mode)), "not a regular file")


def _shown(path: str | Path) -> str:
    """``path`` quoted for a message (``repr``: a control character is escaped, never sent to the terminal)."""
    return repr(str(path))


# ---------------------------------------------------------------- inputs


def open_input(path: str | Path, what: str) -> int:
    """A read-only descriptor of ``path`` if it is a regular file, else a one-line P2Error naming what it is
    (opened non-blocking, so a FIFO with no writer is refused at once instead of waiting forever)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise P2Error(f"{what} {_shown(path)} does not exist") from None
    except OSError as err:
        raise P2Error(f"cannot read {what} {_shown(path)}: {err.strerror}") from None
    kind = kind_of(os.fstat(fd).st_mode)
    if kind is not None:
        os.close(fd)
        raise P2Error(f"{what} {_shown(path)} is {kind}, not a regular file")
    return fd


def require_file(path: str | Path, what: str) -> Path:
    """``path`` if it names a regular file (checked by opening it, as a read will), else one line saying
    whether it is missing or what it is."""
    os.close(open_input(path, what))
    return Path(path)


def read_bytes_at_most(path: str | Path, limit: int, what: str) -> bytes:
    """At most ``limit`` + 1 bytes of the regular file ``path`` (the caller refuses the extra byte)."""
    fd = open_input(path, what)
    with os.fdopen(fd, "rb") as f:
        return f.read(limit + 1)


# ---------------------------------------------------------------- outputs


def output_name(path: str | Path, flag: str) -> Path:
    """``path`` as the name of a file to write: not empty, not ending in a slash (a folder's name)."""
    text = str(path)
    if not text:
        raise P2Error(f"{flag} is empty; give a file name")
    if text.endswith(("/", os.sep)):
        raise P2Error(f"{flag} {_shown(text)} names a folder; give a file name")
    return Path(text)


def written_through(path: str | Path) -> bool:
    """True when ``path`` (its link followed) is a character device or a FIFO, which are written through."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def through_target(path: str | Path, flag: str) -> bool:
    """True when ``path`` (its link followed) is written through: a character device or a FIFO; False for a
    regular file or a missing one; refused for a directory, a block device or a socket."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as err:
        raise P2Error(f"{flag} {_shown(path)}: cannot write: {err.strerror}") from None
    kind = kind_of(mode)
    if kind is None:
        return False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return True
    raise P2Error(f"{flag} {_shown(path)} is {kind}; give a regular file, a character device or a FIFO")


def _real(path: Path) -> Path:
    """The file a write to ``path`` lands in: its symbolic links followed (a dangling one: its target)."""
    return Path(os.path.realpath(path))


def _folder(real: Path, named: Path, flag: str) -> Path:
    """The existing folder that ``real`` (``named`` resolved) goes in, or a one-line refusal naming the
    folder as the user wrote it (or the link's target folder)."""
    parent = real.parent
    if not parent.is_dir():
        what = "is not a folder" if parent.exists() else "does not exist"
        linked = real != Path(os.path.abspath(named))
        shown = f"the folder of its link's target {_shown(parent)}" if linked else _shown(named.parent)
        raise P2Error(f"{flag} {_shown(named)}: {shown} {what}")
    return parent


def check_output(path: str | Path, flag: str) -> Path:
    """``path`` checked up front, before the work whose result it will hold: a name, not a directory, a
    block device or a socket, and (a regular file or a missing one) in a folder where a file can be made."""
    out = output_name(path, flag)
    if not through_target(out, flag):
        real = _real(out)
        fd, tmp = _temporary(real, out, flag)
        os.close(fd)
        os.unlink(tmp)
    return out


def _ending(real: Path) -> str:
    """The extension a temporary file for ``real`` keeps (``.png`` also of a file named ``.png``, which
    ``Path.suffix`` reads as having none), so a writer that checks it sees the user's."""
    return f".{real.name.rsplit('.', 1)[1]}" if "." in real.name else ""


def _temporary(real: Path, named: Path, flag: str, ending: str | None = None) -> tuple[int, str]:
    """A new empty file beside ``real`` (hidden, named after it), or a one-line refusal naming ``named``."""
    suffix = _ending(real) if ending is None else ending
    try:
        return tempfile.mkstemp(prefix=f".{real.name[:40]}.", suffix=suffix, dir=_folder(real, named, flag))
    except OSError as err:
        raise P2Error(f"{flag} {_shown(named)}: cannot write there: {err.strerror}") from None


def open_through(path: str | Path, flag: str) -> int:
    """A write-only descriptor of the character device or FIFO ``path``; a FIFO with no reader is refused
    at once (opening it for writing would wait for one)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == errno.ENXIO:
            raise P2Error(f"{flag} {_shown(path)} is a FIFO with no reader; start its reader first or give a "
                          "regular file") from None
        raise P2Error(f"{flag} {_shown(path)}: cannot write: {err.strerror}") from None
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)  # a reader may be slow
    return fd


def write_all(fd: int, data: bytes) -> None:
    """Every byte of ``data`` to ``fd`` (a pipe or a device may take them in parts)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _mode_for(real: Path) -> int:
    """The mode a written file gets: an existing file's own, else a new file's under the umask (read by
    setting it and setting it back: the CLI writes its outputs from one thread)."""
    try:
        return stat.S_IMODE(os.stat(real).st_mode)
    except OSError:
        mask = os.umask(0o022)
        os.umask(mask)
        return 0o666 & ~mask


@contextmanager
def output_file(path: str | Path, flag: str, ending: str | None = None) -> Iterator[Path]:
    """A temporary file to write in the block, ending in ``ending`` (default: as ``path``); when the block
    succeeds, its bytes go to ``path`` (see the module's docstring). Nothing is left behind when the block
    or the writing fails, and a message that names the temporary file names ``path`` instead."""
    out = check_output(path, flag)
    through = through_target(out, flag)
    real = _real(out)
    if through:
        fd, tmp = tempfile.mkstemp(suffix=_ending(real) if ending is None else ending)
    else:
        fd, tmp = _temporary(real, out, flag, ending)
    os.close(fd)
    try:
        try:
            yield Path(tmp)
        except P2Error as err:
            raise P2Error(str(err).replace(tmp, str(out))) from None
        if through:
            sink = open_through(out, flag)
            try:
                write_all(sink, Path(tmp).read_bytes())
            finally:
                os.close(sink)
        else:
            os.chmod(tmp, _mode_for(real))  # mkstemp makes it private
            os.replace(tmp, real)
    except OSError as err:
        raise P2Error(f"{flag} {_shown(out)}: cannot write: {err.strerror}") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def write_text(path: str | Path, text: str, flag: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` whole, as ``output_file`` does."""
    with output_file(path, flag) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)
