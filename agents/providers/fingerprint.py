"""Fingerprints of model files, for keying the response cache by what a model is rather than by its name."""

from __future__ import annotations

from pathlib import Path


def file_stamp(path: Path) -> str:
    """Path, size and modification time of a file, or of every file under a folder.

    Stamps, not hashes: weights and adapters run to gigabytes, and hashing them on every start would cost more than
    the calls the cache saves; retraining or replacing a file changes its size or mtime.
    """
    path = path.expanduser()
    if not path.exists():
        return f"{path}:missing"
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    parts = []
    for f in files:
        st = f.stat()
        parts.append(f"{f.resolve()}:{st.st_size}:{st.st_mtime_ns}")
    return "|".join(parts)
