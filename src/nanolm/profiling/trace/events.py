"""The events of a Kineto / Chrome trace as the reader decodes them: the categories it sorts them by, and the typed
records (msgspec Structs) its decoder turns a file's bytes into, reading only the fields the analysis uses."""

from __future__ import annotations

from typing import Any

import msgspec

HOST_CATS = {
    "cpu_op",
    "user_annotation",
    "python_function",
    "cuda_runtime",
    "cuda_driver",
    "overhead",
    "Trace",
    "cpu_instant_event",
    "fwdbwd",
}


DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}


DEVICE_ANNOTATION = "gpu_user_annotation"


STEP_PREFIX = "ProfilerStep#"


Id = int | float | str | None  # Kineto writes ids, pids and tids as numbers or strings


class Args(msgspec.Struct, frozen=True, gc=False):
    """The two fields of an event's ``args`` the analysis reads; the rest (input shapes, grid sizes) is skipped
    unread by the decoder."""

    correlation: Id = None
    external_id: Id = msgspec.field(name="External id", default=None)


NO_ARGS = Args()


class Event(msgspec.Struct, eq=False, repr_omit_defaults=True):
    """One complete ("X") event of the trace; times in microseconds. Decoded straight from the file's bytes: an
    event object of the trace's JSON becomes one of these, with only the fields below read."""

    name: str = ""
    cat: str = ""
    ts: float | None = None
    dur: float | None = None
    pid: Id = None
    tid: Id = None
    ph: str | None = None
    id: Id = None  # a flow's id (ph "s"/"f")
    args: Args = NO_ARGS
    # Set by the loader, never by the file (the names cannot be a trace's keys):
    parent: Event | None = msgspec.field(name="nanolm:parent", default=None)  # host: innermost event around this one
    children: Any = msgspec.field(name="nanolm:children", default=())  # host: the events nested directly (a list)
    launched_by: Event | None = msgspec.field(name="nanolm:launch", default=None)  # device: its runtime/driver call
    made_by: Event | None = msgspec.field(name="nanolm:op", default=None)  # launch call or device: the cpu_op behind it

    @property
    def end(self) -> float:
        return self.ts + self.dur

    @property
    def correlation(self) -> Id:
        return self.args.correlation

    @property
    def external_id(self) -> Id:
        return self.args.external_id

    def ancestors(self) -> list[Event]:
        """This event, then its parents outward."""
        out, e = [], self
        while e is not None:
            out.append(e)
            e = e.parent
        return out

    def __repr__(self) -> str:
        return f"Event({self.name!r}, {self.cat}, ts={self.ts}, dur={self.dur})"


class TraceFile(msgspec.Struct, gc=False):
    """A trace file's top level as the typed decoder reads it."""

    traceEvents: list[Event]
    deviceProperties: list[dict] | None = None
    schemaVersion: Any = None
    distributedInfo: Any = None
