"""Real faults for tests: a full filesystem and damaged files, made by the test itself.

`small_filesystem` mounts a tmpfs of a few hundred KiB when the platform lets the test (root, or
a container with CAP_SYS_ADMIN); `fill` then fills it to ENOSPC. Where no tmpfs can be mounted,
tests use the documented equivalent instead: a subprocess whose files may not grow past
`RLIMIT_FSIZE` (writes fail with EFBIG, as they fail with ENOSPC on a full disk).
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import subprocess
from collections.abc import Iterator
from pathlib import Path


def can_mount_tmpfs(probe: Path) -> bool:
    """Whether this process may mount a tmpfs (tried once on `probe`)."""
    probe.mkdir(parents=True, exist_ok=True)
    mounted = _mount(probe, 64 * 1024)
    if mounted:
        _umount(probe)
    return mounted


@contextlib.contextmanager
def small_filesystem(path: Path, size_bytes: int) -> Iterator[Path]:
    """A tmpfs of `size_bytes` mounted on `path` (created) for the block's duration."""
    path.mkdir(parents=True, exist_ok=True)
    if not _mount(path, size_bytes):
        raise OSError(f"cannot mount a tmpfs on {path}")
    try:
        yield path
    finally:
        _umount(path)


def fill(directory: Path, *, name: str = "filler") -> Path:
    """Write to `directory/name` until the filesystem is full (ENOSPC); returns the file."""
    filler = directory / name
    chunk = b"\0" * 4096
    with filler.open("wb", buffering=0) as out:
        while True:
            try:
                out.write(chunk)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                break
    with filler.open("ab", buffering=0) as out:  # the last partial block too
        for _ in range(4096):
            try:
                out.write(b"\0")
            except OSError:
                break
    return filler


def damage(path: Path, *, offset: int, length: int, seed: int = 25) -> None:
    """Overwrite `length` bytes of `path` at `offset` with random bytes (fixed seed)."""
    noise = random.Random(seed).randbytes(length)
    with path.open("r+b") as out:
        out.seek(offset)
        out.write(noise)


def _mount(path: Path, size_bytes: int) -> bool:
    if os.geteuid() != 0:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
