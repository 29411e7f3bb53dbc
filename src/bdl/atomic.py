"""Writing a file so that readers see the old or the new content, never half of either.

The content goes to a temporary file in the destination's folder (``os.replace`` is atomic only
within one filesystem), is flushed to disk (unless the caller defers that to `fsync_path`),
then renamed over the destination. The temporary is created with mode 0o666 and ``O_EXCL``, so
the kernel applies the user's umask (and any default ACL) exactly as for an ordinary ``open``:
``tempfile.mkstemp`` would make it 0600 and a run's files unreadable to the group that shares them.
Nothing reads the process umask, which cannot be read without briefly changing it for every
thread.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["TEMPORARY", "atomic_file", "fsync_path"]

#: The names of the temporary files (a glob pattern): ``.<name>.<8 hex digits>.tmp``.
TEMPORARY = ".*.tmp"


def _create_temporary(path: Path) -> tuple[int, Path]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, durable: bool = True) -> Iterator[BinaryIO]:
    """Yield a binary file whose content replaces ``path`` when the block ends without error;
    with ``durable``, its content is on disk before it does.

    On any error (a full disk included) the temporary is removed and ``path`` keeps its previous
    content; the ``OSError`` propagates for the caller to word.
    """
    path = Path(path)
    fd, tmp = _create_temporary(path)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def fsync_path(path: Path) -> None:
    """Flush the file ``path`` (written with ``durable=False``) to disk; for a folder, its
    entries, so that the names renames gave files survive a power cut too."""
    if os.name != "posix" and path.is_dir():
        return  # Windows cannot open a folder to flush it
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
