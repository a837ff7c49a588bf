"""Figures for the page: matplotlib figures as SVG (drawn from the numbers), and the PNGs the tools saved
in the run, decoded and downsampled (so a damaged file is caught here, and the page stays small)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from .model import Figure

MAX_SIDE_PX = 1000  # a PNG's longer side on the page; larger ones are downsampled
SMALL_SIDE_PX = 600  # once the page's figures pass SOFT_BUDGET
TINY_SIDE_PX = 300  # the last try for a figure that would not fit otherwise
SOFT_BUDGET = 2_000_000  # bytes of figures before later ones are made smaller
HARD_BUDGET = 3_300_000  # bytes of figures a page holds at most: base64 adds 1/3, so with its tables it stays < 5 MB


class Budget:
    """The bytes of figures a page has used, and how large the next one may be."""

    def __init__(self) -> None:
        self.used = 0

    @property
    def max_side(self) -> int:
        return MAX_SIDE_PX if self.used < SOFT_BUDGET else SMALL_SIDE_PX

    def fits(self, figure: Figure) -> bool:
        return self.used + len(figure.data) <= HARD_BUDGET

    def take(self, figure: Figure) -> Figure:
        self.used += len(figure.data)
        return figure


def svg_figure(fig: Any, key: str, caption: str) -> Figure:
    """A matplotlib Figure as SVG, closed afterwards. Text stays text (no glyph outlines: smaller, and
    selectable); no date in the file, so the same numbers give the same bytes."""
    import matplotlib

    from ..plots import pyplot

    buf = io.BytesIO()
    width, height = fig.get_size_inches()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": key}):
        fig.tight_layout()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    pyplot().close(fig)
    return Figure(key, caption, "image/svg+xml", buf.getvalue(), int(width * 100), int(height * 100))


def png_file(path: Path, key: str, caption: str, source: str, max_side: int = MAX_SIDE_PX) -> Figure:
    """A PNG from the run, decoded (a ValueError naming the problem when it is not a readable PNG) and
    downsampled so its longer side is at most max_side pixels (one that fits is embedded as it is);
    shown at most at its pixel size."""
    from PIL import Image, UnidentifiedImageError

    raw = Path(path).read_bytes()
    try:
        with Image.open(io.BytesIO(raw)) as img:
            img.load()  # decodes every pixel: a cut-short file fails here, not in the reader's browser
            if img.format != "PNG":
                raise ValueError(f"not a PNG image ({img.format})")
            size = img.size
            if max(size) > max_side:
                scale = max_side / max(size)
                img = img.resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))), Image.Resampling.LANCZOS)
                buf = io.BytesIO()
                img.save(buf, format="PNG")
                raw, size = buf.getvalue(), img.size
    except UnidentifiedImageError:
        raise ValueError("not an image") from None
    except Image.DecompressionBombError:
        raise ValueError("too many pixels to be a figure") from None
    except (OSError, SyntaxError) as e:  # PIL reports a cut-short or corrupt PNG as OSError or SyntaxError
        raise ValueError(f"a damaged image ({e})") from None
    return Figure(key, caption, "image/png", raw, size[0], size[1], source)
