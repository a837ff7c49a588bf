"""What the grading promises about the learner's code, and how it keeps the promise.

The learner's file runs in a separate process (``nanolm.problems.runner``), in its own process group,
killed as a whole at the time limit (a child process it starts dies with it). The process runs on a
fresh temporary copy of the learner's folder (``copy_folder``): the checks read back only from that
copy, so nothing the code writes can reach the learner's own folder or a later check. Inside the
process an audit hook (``Guard``) refuses, while the learner's code and the checks run:

- network connections (``socket.connect`` and ``connect_ex``, name lookups), Unix sockets aside;
- changing the working folder;
- writing, deleting or renaming anything but new files in the copy, in the system's temporary folder
  and in the grading's cache folder (``XDG_CACHE_HOME``): never the folder's own files (the copy's
  originals), the learner's real folder, the nanolm package, or another file's copy;
- reading the shipped reference solutions (the checks compute their expected answers at run time,
  from their own seed; nothing in the problem's folder holds one).

What the code prints is capped (``OUTPUT_LIMIT`` characters per check, ``CappedStream``): past it, the
print raises, a failed check with a clear message rather than a grading process drowning in output.
This guards against mistakes, not against an attacker: a child process runs without the hook, and
ctypes gets around any of it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import tempfile
from pathlib import Path

OUTPUT_LIMIT = 1_000_000  # characters the learner's code may print per check (and at import)
COPY_FILE_LIMIT = 5_000_000  # bytes: larger files of the learner's folder are not copied
COPY_COUNT_LIMIT = 200  # files of the learner's folder copied at most
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


class OutputLimitExceeded(Exception):
    """The learner's code printed more than OUTPUT_LIMIT characters in one check."""


def copy_folder(learner_file: Path, dest: Path) -> Path:
    """Copy the learner's file and the other plain files of its folder (not sub-folders, none over
    COPY_FILE_LIMIT bytes, at most COPY_COUNT_LIMIT) into `dest`; the copied learner file's path."""
    learner_file = Path(learner_file).resolve()
    dest.mkdir(parents=True, exist_ok=True)
    copied = 0
    with os.scandir(learner_file.parent) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name == learner_file.name or not entry.is_file(follow_symlinks=False):
                continue
            if copied >= COPY_COUNT_LIMIT or entry.stat().st_size > COPY_FILE_LIMIT:
                continue
            shutil.copyfile(entry.path, dest / entry.name)
            copied += 1
    shutil.copyfile(learner_file, dest / learner_file.name)
    return dest / learner_file.name


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _is_reference(path: Path, files_dir: Path) -> bool:
    """A shipped reference solution: files/NAME/reference.py, or a pool's *_fixed.py and *_report.toml."""
    if not _inside(path, files_dir):
        return False
    return path.name == "reference.py" or path.name.endswith(("_fixed.py", "_report.toml"))


class Guard:
    """The audit hook of the grading process: refuses what the module docstring lists while `active`.

    `protect`: folders nothing may be written in (the learner's real folders, the nanolm package,
    the grading folder with every copy); `writable`: folders inside those that may be (the cache);
    `copy`: the copy being graded now, writable but for its originals (the files copied into it).
    Elsewhere only the grading's own temporary folder (its TMPDIR, inside the grading folder) and /dev are
    writable: the machine's /tmp, where a checkout may live, is not."""

    def __init__(self, protect: list[Path], files_dir: Path, writable: list[Path] = ()) -> None:
        self.protect = [Path(p).resolve() for p in protect]
        self.writable = [Path(p).resolve() for p in writable]
        self.scratch = [Path(tempfile.gettempdir()).resolve(), Path("/dev")]
        self.files_dir = Path(files_dir).resolve()
        self.copy: Path | None = None
        self.originals: set[Path] = set()
        self.active = False

    def enter(self, copy: Path) -> None:
        """Grade the file whose copy is the folder `copy` next: its originals become read-only and it
        becomes the working folder (changed here with the hook off)."""
        self.active = False
        self.copy = Path(copy).resolve()
        self.originals = {p.resolve() for p in self.copy.iterdir() if p.is_file()}
        os.chdir(self.copy)
        self.active = True

    def _resolve(self, path: object) -> Path | None:
        if isinstance(path, int):
            return None
        try:
            return Path(os.fsdecode(path)).resolve()
        except (TypeError, ValueError, OSError):
            return None

    def _writable(self, path: Path) -> bool:
        if path in self.originals:
            return False
        if (self.copy is not None and _inside(path, self.copy)) or any(_inside(path, p) for p in self.writable):
            return True
        if any(_inside(path, p) for p in self.protect):
            return False
        return any(_inside(path, p) for p in self.scratch)

    def _refuse_write(self, raw: object, what: str) -> None:
        path = self._resolve(raw)
        if path is None or self._writable(path):
            return
        where = "a file of your folder" if path in self.originals else "outside the grading copy of your folder"
        raise PermissionError(f"grading does not let your code {what} {path.name} ({where})")

    def __call__(self, event: str, args: tuple) -> None:
        if not self.active:
            return
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None))[:3]
            writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & _WRITE_FLAGS)
            if writes:
                self._refuse_write(path, "write")
                return
            resolved = self._resolve(path)
            if resolved is not None and _is_reference(resolved, self.files_dir):
                raise PermissionError(
                    f"grading does not let your code read {resolved.name}: the reference "
                    "solutions are not readable while your file is graded"
                )
        elif event in ("os.remove", "os.rmdir", "shutil.rmtree"):
            self._refuse_write(args[0], "delete")
        elif event == "os.rename":
            self._refuse_write(args[0], "rename")
            self._refuse_write(args[1], "overwrite")
        elif event in ("os.truncate", "os.chmod", "os.utime"):
            self._refuse_write(args[0], "change")
        elif event == "os.chdir":
            raise PermissionError(
                f"grading does not let your code change the working folder "
                f"(os.chdir({os.fsdecode(args[0]) if not isinstance(args[0], int) else args[0]!r}))"
            )
        elif event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
            sock = args[0]
            if getattr(sock, "family", None) != getattr(socket, "AF_UNIX", None):
                raise OSError("the network is off while grading")
        elif event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr"):
            raise OSError("the network is off while grading (no name lookups)")


class CappedStream:
    """A text stream that passes writes on to `stream` until OUTPUT_LIMIT characters since the last
    `reset()`, then raises OutputLimitExceeded (once per reset; later writes are dropped)."""

    def __init__(self, stream, limit: int = OUTPUT_LIMIT) -> None:
        self.stream, self.limit = stream, limit
        self.count = 0
        self.over = False

    def reset(self) -> None:
        self.count, self.over = 0, False

    def write(self, text: str) -> int:
        if self.over:
            return len(text)
        self.count += len(text)
        if self.count > self.limit:
            self.over = True
            self.stream.write("\n[nanolm: output past the limit dropped]\n")
            raise OutputLimitExceeded(
                f"your code printed more than {self.limit // 1_000_000} MB (at import or in "
                "one check); print less: the grader stops reading there"
            )
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", "utf-8")


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by `pid` (the grading process and every child it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
