"""Peak memory of SAE activation collection: 10⁶ tokens × D = 384 (1.54 GB of float32) through
`collect_store`, once with the default RAM budget (2 GiB: the matrix fits, so it is kept in memory) and once
with a small budget (written to a file as it comes, then memory-mapped), each in a fresh process.

The batches are synthetic ([4096, 384] float32, made one at a time: the point is the store, not the model).
Reported per mode: the path taken, the process's peak resident memory (ru_maxrss) before collection (torch
imported) and after it, the difference against the matrix's size, and, for the file, that it is gone
after `store.close()`. Then 20 random training batches are read from the store, and the peak is read
again with the resident memory split into anonymous (the process's own) and file-backed: reading a memory
map maps the file's pages (the kernel maps neighbours of each page touched too), and those count in RSS
but are page cache the kernel drops under pressure, not memory the process holds.

    .venv/bin/python bench/sae_memory.py [--tokens 1000000 --d 384 --small-ram-mib 64] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def rss_now() -> dict:
    """The resident memory now, split (Linux): anonymous (the process's own) and file-backed (pages of a
    memory-mapped file: page cache the kernel can drop and read again)."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile"):
            out[key] = int(value.split()[0]) / 1024
    return out


def child(tokens: int, d: int, batch: int, ram_bytes: int | None) -> dict:
    import torch

    from nanolm.interp.sae.store import RAM_BYTES, collect_store

    ram_bytes = RAM_BYTES if ram_bytes is None else ram_bytes
    gen = torch.Generator().manual_seed(0)

    def batches():
        while True:
            yield torch.randn(batch, d, generator=gen)

    torch.randn(batch, d, generator=gen)  # the allocator's first block, before the baseline
    before = peak_mib()
    with tempfile.TemporaryDirectory() as folder:
        store = collect_store(batches(), tokens, d, folder=Path(folder), ram_bytes=ram_bytes)
        after, after_split = peak_mib(), rss_now()
        path = store.path
        file_mib = path.stat().st_size / 2**20 if path is not None else 0.0
        for _, (_, x) in zip(range(20), store.batches(batch, gen)):
            assert x.shape == (batch, d)
        after_read, read_split = peak_mib(), rss_now()
        store.close()
        left = sorted(p.name for p in Path(folder).iterdir())
    return {"ram_bytes": ram_bytes, "on_disk": path is not None, "rows": store.n if path is None else tokens,
            "file_mib": file_mib, "file_removed": path is None or not path.exists(), "left_in_folder": left,
            "peak_before_mib": before, "peak_after_mib": after, "peak_after_reading_mib": after_read,
            "anon_after_mib": after_split.get("RssAnon"), "anon_after_reading_mib": read_split.get("RssAnon"),
            "file_backed_after_reading_mib": read_split.get("RssFile")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=1_000_000)
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--small-ram-mib", type=int, default=64, help="the small budget (forces the file)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)  # ram_bytes; -1: the default
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.tokens, args.d, args.batch, None if args.child < 0 else args.child)))
        return

    matrix_mib = args.tokens * args.d * 4 / 2**20
    print(f"collect_store: {args.tokens:,} tokens x D={args.d} float32 = {matrix_mib:,.0f} MiB, "
          f"batches of {args.batch}")
    results = {}
    for name, budget in (("default budget (2 GiB)", -1), (f"budget {args.small_ram_mib} MiB", args.small_ram_mib * 2**20)):
        cmd = [sys.executable, __file__, "--child", str(budget), "--tokens", str(args.tokens), "--d", str(args.d),
               "--batch", str(args.batch)]
        r = json.loads(subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout.splitlines()[-1])
        grew = r["peak_after_mib"] - r["peak_before_mib"]
        where = (f"on disk ({r['file_mib']:,.0f} MiB file, memory-mapped; removed on close: {r['file_removed']})"
                 if r["on_disk"] else "in RAM")
        print(f"{name}: {where}; peak RSS {r['peak_before_mib']:,.0f} MiB before -> {r['peak_after_mib']:,.0f} MiB "
              f"after collection (+{grew:,.0f} MiB = {grew / matrix_mib:.2f}x the matrix); "
              f"{r['peak_after_reading_mib']:,.0f} MiB after reading 20 random batches, of which "
              f"{r['anon_after_reading_mib']:,.0f} MiB anonymous and {r['file_backed_after_reading_mib']:,.0f} MiB "
              "file-backed (pages of the mapped file, which the kernel can drop)")
        results[name] = {**r, "grew_mib": grew, "grew_vs_matrix": grew / matrix_mib}
    if args.json:
        args.json.write_text(json.dumps({"tokens": args.tokens, "d": args.d, "matrix_mib": matrix_mib,
                                         "modes": results}, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
