"""nanolm profile: where a training step's time goes, in plain words, with MFU (model FLOPs utilization).

One pipeline, each stage a subpackage that imports only the ones after it (an import-linter contract):

    record/     runs the steps under torch.profiler and writes one trace per window (the only part that runs torch):
                session, the step clock, the sync watch, the peak, nanolm's training, anyone's script, ranks, isolation
    trace/      reads a trace once into events (load) and names what each is (classify: operator categories and
                GPU kernel classes)
    measure/    trace -> numbers: host windows, communication, the device timeline, the replay, the clock's and
                MFU's maths
    judge/      numbers -> a verdict: the host's and the GPU's findings ranked by what their fix saves, the ranks
                merged, an expectation checked
    assemble    the stages -> one ProfileReport, the same way for a live run and for a recorded trace
    report      every result type, plain data (what the JSON holds and compare and the run's page read back)
    compare     two reports: before / after beyond the run-to-run spread
    show/       the tables, laid out once for the terminal and the page, and the sentences around them

The front door is four functions, loaded on first use (importing the package costs no torch):
``profile_training`` and ``profile_script`` record, ``analyze_trace`` reads a recorded trace, ``compare_reports``
compares two reports."""

from __future__ import annotations

from importlib import import_module
from typing import Any

_WHERE = {
    "profile_training": "record.training",
    "profile_script": "record.training",
    "analyze_trace": "assemble",
    "compare_reports": "compare",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
