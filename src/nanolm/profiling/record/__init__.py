"""Recording: the only part of the profiler that runs torch (a script, nanolm's training, or its ranks)."""

from __future__ import annotations

import os
from pathlib import Path

import nanolm


def pythonpath_with_nanolm(existing: str | None) -> str:
    """PYTHONPATH for a child process that must import this nanolm: the folder holding the `nanolm` package
    (src/ of a checkout), then what was already there. Never the package folder itself, whose modules
    (tokenizers.py, config.py, data.py, ...) would shadow a profiled script's own imports of those names."""
    root = Path(nanolm.__file__).resolve().parents[1]
    return os.pathsep.join(filter(None, [str(root), existing]))
