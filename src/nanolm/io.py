"""Atomic file writes: write a temporary file in the same folder, fsync, then rename over the
target, so a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import asdict, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from .errors import UserError


def check_writable_file(path: str | Path, option: str, example: str = "out.json") -> Path:
    """`path` as a Path, once it is known a file can be written there; else a UserError naming `option`.
    Commands call this before their work, so a typo in an output path costs nothing."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{option} {path}: is a folder; give a file name such as {path / example}")
    if not path.parent.is_dir():
        raise UserError(f"{option} {path}: the folder {path.parent} does not exist; create it or choose another path")
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UserError(f"{option} {path}: cannot write there; choose a writable path")
    return path


def _read_umask() -> int:
    umask = os.umask(0)  # the only way to read it is to set it; done once, at import, before any thread
    os.umask(umask)
    return umask


_UMASK = _read_umask()


def default_file_mode() -> int:
    """0o666 less the umask: the mode open() gives a new file (some writers, safetensors among them,
    make 0o600 files; chmod them to this)."""
    return 0o666 & ~_UMASK


def _new_file_mode(path: Path) -> int:
    """The mode a plain open() would give: the target's own if it exists, else 0o666 less the umask
    (mkstemp makes 0o600 files, which os.replace would keep)."""
    return path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_UMASK


def to_jsonable(obj: Any) -> Any:
    """Dataclasses, paths and enums as plain JSON values; NaN and infinity as null (JSON has neither)."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(asdict(obj))
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, dict):
        return {(k.value if isinstance(k, Enum) else k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:  # the folder is missing or read-only: the user's to fix
        raise UserError(f"cannot write {path}: {e.strerror}; choose another path") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _new_file_mode(path))
        os.replace(tmp, path)
    except IsADirectoryError:
        Path(tmp).unlink(missing_ok=True)
        raise UserError(f"cannot write {path}: it is a folder; give a file name") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: object) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def read_json(path: str | Path) -> object:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def staging_folder(folder: str | Path) -> Path:
    """A new empty sibling of folder, to write a whole artifact into before install_folder puts it in place;
    its mode is what mkdir would give (mkdtemp makes 0o700; the run's other folders follow the umask)."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    files = default_file_mode()  # 0o666 & ~umask
    staging.chmod(files | ((files & 0o444) >> 2))  # execute (enter) wherever read is allowed
    return staging


def install_folder(staging: Path, folder: Path) -> None:
    """Rename a fully written staging folder to folder. An existing non-empty folder is moved aside first and
    removed after, so an interrupted save leaves the old artifact or the new one, never a mix."""
    if folder.is_dir() and any(folder.iterdir()):
        old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old.", dir=folder.parent))
        folder.rename(old / "previous")
        staging.rename(folder)
        shutil.rmtree(old, ignore_errors=True)
    else:
        if folder.is_dir():
            folder.rmdir()
        staging.rename(folder)
