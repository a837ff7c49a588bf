"""What stderr shows while a profiled script has taken no optimizer step yet (the script runner's wait)."""

from __future__ import annotations

import contextlib
import os
import threading
import time


class WaitingLine:
    """What stderr shows while the script has taken no optimizer step: on a terminal, a spinner redrawn in
    place (from the first second on); in any case, one line when the wall-clock window is recorded. Written
    to the terminal's own fd, so it never lands in the profiler's log."""

    FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"

    def __init__(self, wall_seconds: float) -> None:
        self.wall_seconds = wall_seconds
        self.fd = os.dup(2)
        self.tty = os.isatty(self.fd)
        self.recorded = False
        self._t0 = time.perf_counter()
        self._stop = threading.Event()
        self._drawn = False
        self._thread: threading.Thread | None = None

    def _write(self, text: str) -> None:
        with contextlib.suppress(OSError):
            os.write(self.fd, text.encode("utf-8", "replace"))

    def _spin(self) -> None:
        i = 0
        while not self._stop.wait(0.1 if self._drawn else 1.0):
            elapsed = time.perf_counter() - self._t0
            text = (
                f"no optimizer step yet ({elapsed:.0f} s); its first {self.wall_seconds:g} s are kept as a wall-clock "
                "window; Ctrl-C stops the script and reports it"
                if self.recorded
                else f"waiting for the script's first optimizer step ({elapsed:.0f} s; without one by "
                f"{self.wall_seconds:g} s, a wall-clock window)"
            )
            self._write(f"\r{self.FRAMES[i % len(self.FRAMES)]} nanolm profile: {text}\x1b[K")
            self._drawn, i = True, i + 1

    def start(self) -> WaitingLine:
        if self.tty:
            self._thread = threading.Thread(target=self._spin, daemon=True)
            self._thread.start()
        return self

    def window_recorded(self) -> None:
        self.recorded = True
        self._write(
            ("\r\x1b[K" if self._drawn else "")
            + f"nanolm profile: no optimizer step in the first {self.wall_seconds:g} s: that recording is kept as "
            "a wall-clock window; waiting for a first step or the script's end (Ctrl-C reports the window now)\n"
        )

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._drawn:
            self._write("\r\x1b[K")
            self._drawn = False

    def close(self) -> None:
        self.stop()
        with contextlib.suppress(OSError):
            os.close(self.fd)
