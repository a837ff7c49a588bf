"""A trace file's events decoded a few megabytes at a time, never the whole file's bytes in memory at once.

A trace is one JSON object whose ``traceEvents`` list holds nearly all of its bytes. The file (plain, or gzipped and
unpacked as it is read) is cut between two events of that list, at a ``}`` ``,`` ``{`` with only whitespace
between; each piece is decoded as a list of typed events on its own and handed on, so the bytes of only one piece
are held, and what the caller does not keep (metadata events, flows, fields it does not read) is freed piece by
piece.

A cut is proven, not guessed: the first piece starts just inside the list (the fields before it decode as a trace
object with an empty list), and a piece that decodes as a whole list of objects ends where it began, at the list's
own level, so the next piece starts there too. A piece that does not decode (a cut inside an event's arguments)
is tried again at the cut before it, up to _TRIES cuts; a piece that still does not (a damaged file, a field of
another type) makes ``decode_by_pieces`` answer None, and the caller reads the file the whole way, which names the
problem where there is one.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

PIECE_BYTES = 8 << 20  # bytes decoded at a time: small beside a real trace, large beside one event

_HEAD_LIMIT = 64 << 20  # the fields before the event list are small; past this the file is read the whole way
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BETWEEN_EVENTS = re.compile(rb"\}\s*,\s*\{")
_TRIES = 4  # cuts tried before the file is read the whole way


def file_blocks(path: Path, size: int) -> Iterator[bytes]:
    """The file's bytes, gunzipped as they are read where it is gzipped, in blocks of at most `size` (a gzip file's
    blocks are `size` unpacked, however well it packs). Raises zlib.error or EOFError for a damaged or truncated
    gzip file."""
    with open(path, "rb") as f:
        first = f.read(size)
        if first[:2] == b"\x1f\x8b":
            yield from _gunzipped(f, first, size)
            return
        while first:
            yield first
            first = f.read(size)


def _gunzipped(f: BinaryIO, data: bytes, size: int) -> Iterator[bytes]:
    """The gzip file f's members unpacked one after another (gzip -c a b > c), `size` bytes at a time; data: what
    has been read of f already. Zero bytes between or after members are skipped, as gzip's own reader does."""
    unpack, started = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS), False
    while True:
        if not started:
            data = data.lstrip(b"\0")
        while data:
            started = True
            block = unpack.decompress(data, size)
            if block:
                yield block
            if unpack.eof:  # a member's end: what follows is the next member's, or padding
                data = unpack.unused_data.lstrip(b"\0")
                unpack, started = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS), False
            else:
                data = unpack.unconsumed_tail
        data = f.read(size)
        if data:
            continue
        if started:  # the input is used up: what inflate still holds, then its end marker must have come
            rest = unpack.flush()
            if rest:
                yield rest
            if not unpack.eof:
                raise EOFError("the gzip stream ends before its end marker")
        return


def decode_by_pieces(
    path: Path,
    events_type: Any,
    top_type: Any,
    take: Callable[[list], None],
    piece_bytes: int | None = None,
    only: bytes | None = None,
) -> tuple[Any, Any] | None:
    """Decode the trace file at `path` piece by piece, calling take(events) with each piece's events (a list of
    `events_type`, in file order). Returns (the fields before the list, the fields after it), each decoded as a
    `top_type` (a msgspec Struct with a ``traceEvents`` field) whose event list holds none or the last piece's
    events (already taken); None when the file cannot be read this way (see the module docstring), in which case
    take may have been called with some of its events, which the caller drops.

    only: take only the events around the places the bytes hold it (a name looked for): a fast scan for a few
    events. Each is decoded from the cuts either side of it, else (where that fails) its whole piece; a piece that
    does not hold `only` is not decoded, so it proves no cut, but an event holding `only` that a wrong cut split
    leaves bytes that do not decode: what is found is every such event, whole, or None."""
    piece_bytes = piece_bytes or PIECE_BYTES
    decode_events = msgspec.json.Decoder(list[events_type]).decode
    decode_top = msgspec.json.Decoder(top_type).decode
    blocks = file_blocks(path, piece_bytes)
    buf = bytearray()
    try:
        start, done = _find_event_list(buf, blocks)
        if start is None:
            return None
        head = decode_top(bytes(buf[:start]) + b"]}")  # proves the list is the trace object's own
        if head.traceEvents:
            return None
        del buf[: start - 1]  # buf starts with the list's "[" and, after each piece, with a "[" put in its place
        while True:
            if not done and len(buf) < piece_bytes:
                block = next(blocks, None)
                done = block is None
                buf += block or b""
                continue
            if done:
                tail = decode_top(b'{"traceEvents":' + bytes(buf))
                take(tail.traceEvents)
                return head, tail
            events, cut = _decode_before_a_cut(buf, decode_events, only)
            if cut is None:  # one event longer than a piece: read on until a cut comes
                block = next(blocks, None)
                done = block is None
                buf += block or b""
                continue
            take(events)
            nxt = buf.index(b"{", cut + 1)
            buf[nxt - 1] = ord("[")
            del buf[: nxt - 1]
    except (msgspec.DecodeError, msgspec.ValidationError, zlib.error, EOFError, OSError):
        return None


def _find_event_list(buf: bytearray, blocks: Iterator[bytes]) -> tuple[int | None, bool]:
    """(offset just past the event list's "[", whether the file has been read to its end), reading blocks into buf
    until the list's key is found; None for the offset when it is not within the head limit."""
    searched = 0
    for block in blocks:
        buf += block
        found = _EVENTS_KEY.search(buf, max(0, searched - 64))
        if found:
            return found.end(), False
        searched = len(buf)
        if searched > _HEAD_LIMIT:
            return None, False
    found = _EVENTS_KEY.search(buf)
    return (found.end() if found else None), True


def _decode_before_a_cut(buf: bytearray, decode_events: Callable, only: bytes | None = None) -> tuple[list, int | None]:
    """(the events before the buffer's last cut that decodes, the offset of that cut's "}"), or ([], None) when the
    buffer has no cut. A "}" "," "{" can also stand inside a string or an event's arguments, and so near the end of
    the file inside the fields after the list: such a cut fails to decode, and the one before it is tried. With
    `only`, a piece without it is not decoded (no events, its last cut)."""
    tried = 0
    for cut in _cuts_from_the_end(buf):
        if only is not None:
            found = _events_around(buf, cut + 1, only, decode_events)
            if found is not None:
                return found, cut
        saved = buf[cut + 1]
        buf[cut + 1] = ord("]")  # the first byte after the "}" is the separator's: put back, or dropped with it
        try:
            with memoryview(buf) as view:
                return decode_events(view[: cut + 2]), cut
        except (msgspec.DecodeError, msgspec.ValidationError):
            buf[cut + 1] = saved
            tried += 1
            if tried == _TRIES:
                raise
    return [], None


def _cuts_from_the_end(buf: bytearray) -> Iterator[int]:
    """The offsets of the buffer's between-events "}", the last first: those in its final megabyte, then, where
    that has none, those in the rest."""
    lo = max(0, len(buf) - (1 << 20))
    for start, end in ((lo, len(buf)), (0, lo)):
        found = [m.start() for m in _BETWEEN_EVENTS.finditer(buf, start, end)]
        yield from reversed(found)


def _events_around(buf: bytearray, end: int, only: bytes, decode_events: Callable) -> list | None:
    """The events of buf[1:end] (a piece: buf[0] is its "[") around each place that holds `only`, each decoded from
    the cuts either side of it (looked for within 64 kB before it); None where one does not decode, for the caller
    to decode the whole piece."""
    out: list = []
    at = buf.find(only, 0, end)
    while at >= 0:
        before = [m.end() - 1 for m in _BETWEEN_EVENTS.finditer(buf, max(1, at - (1 << 16)), at)]
        if not before and at - (1 << 16) > 1:
            return None
        start = before[-1] if before else 1
        after = _BETWEEN_EVENTS.search(buf, at, end)
        stop = after.start() + 1 if after else end
        try:
            out.extend(decode_events(b"[" + bytes(buf[start:stop]) + b"]"))
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        at = buf.find(only, stop, end)
    return out
