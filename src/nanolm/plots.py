"""Saving matplotlib figures: PNG, written atomically, figure closed afterwards."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from .io import atomic_write_bytes


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no screen needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | Path, dpi: int = 100) -> Path:
    """Write fig as a PNG at path (temp file, then rename) and close it."""
    path = Path(path)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=dpi)
    pyplot().close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return path
