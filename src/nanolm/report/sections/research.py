"""Research craft: a paper's claim checked by measurement.

Reads the JSON `nanolm claims kv RUN` saves in the run every time it runs (its `--json` output), each file once,
as the KvClaimReport it was saved from (nanolm.records: KvClaimReport.from_dict):
  claims/kv.json, claims/kv-<file>.json   nanolm claims kv RUN [--data FILE]"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ...runs.artifacts import CLAIMS
from ..model import Column, Measure, Section, Table
from ..registry import RunFiles

if TYPE_CHECKING:  # nanolm.research.kv_claims imports torch: imported when a claim is read, not with the page
    from ...research.kv_claims import AttentionRow, BudgetVerdict, CompressionResult, KvClaimReport


def claims_section(run: RunFiles, section: Section) -> None:
    run.each_part(section, run.files(CLAIMS, "kv"), lambda path, part: _kv_claim(run, path, part))


def read_kv_claim(run: RunFiles, path: Path) -> KvClaimReport:
    """A saved claim check read back as the KvClaimReport it was saved from. A field missing is named "no field 'x'"; a
    malformed one by from_dict's ValueError."""
    from ...research.kv_claims import KvClaimReport

    return run.record(path, KvClaimReport, "compressions", "spectra", "questions", "verdict", "loss", "lossless_threshold")


def _kv_claim(run: RunFiles, path: Path, part: Section) -> None:
    d = read_kv_claim(run, path)
    where = run.rel(path)
    part.lines.append(
        f"KV-cache compression on {d.sequences} × {d.tokens_per_sequence} tokens "
        f"of {d.data} ({where}): the exact model's loss {d.loss:.4f} nats per token; "
        f'"lossless" means |Δloss| ≤ {d.lossless_threshold:.4f} nats (2 standard errors of the evaluation).'
    )
    for q in d.questions:
        part.lines.append(f"{q.question} " + " ".join(q.answer))
    part.measures += [
        Measure(f"Δloss with the KV cache compressed: {c.method}", c.delta_loss, "nats", "lower", ".4f") for c in d.compressions
    ]
    part.tables += kv_claim_tables(d, where)
    part.lines.extend(d.verdict)
    if d.note:
        part.lines.append(f"Note: {d.note}")


# ---- the tables, laid out once: the page's and `nanolm claims kv`'s ------------------------------------

LEVELS = ("70%", "90%", "99%")  # the energy levels a spectrum row gives the rank needed for


def kv_claim_tables(d: KvClaimReport, source: str = "") -> list[Table]:
    """The tables of a KV-cache claim check (the report `nanolm claims kv` saves and prints with --json, read back
    with KvClaimReport.from_dict), as the page and the terminal show them: every compression at equal memory, K
    alone at rank r, the spectra (mean and worst head), the errors after softmax per layer, and the best compression
    at each budget. `source`: the file's name in the run, appended to the captions ("" on the terminal). A file
    saved before K alone was measured has no key_only (its default, []): that table is left out."""
    tables = [
        _compressions(d, source),
        _key_only(d, source),
        _spectra(d, source),
        _worst_heads(d, source),
        _after_softmax(d, source),
        _budgets(d, source),
    ]
    return [t for t in tables if t is not None]


def _from(source: str) -> str:
    """A caption's tail naming the file it was read from; nothing on the terminal."""
    return f" ({source})" if source else ""


def _error_columns() -> list[Column]:
    """The columns a compression's errors are shown in, after softmax and on the loss."""
    return [
        Column("KL(exact ‖ approx attention)", "nats", ".3g"),
        Column("top-key flips", "%", "pct"),
        Column("‖ΔK‖/‖K‖", "%", "pct"),
        Column("‖Δy‖/‖y‖", "%", "pct"),
        Column("Δloss", "nats", ".4f"),
        Column("paired 95% CI", "nats", ".4f"),
        Column("lossless"),
    ]


def _errors(c: CompressionResult) -> list:
    """A compression's cells in the _error_columns."""
    return [c.kl, c.argmax_flips, c.key_error, c.output_error, c.delta_loss, list(c.delta_ci), c.lossless]


def _compressions(d: KvClaimReport, source: str) -> Table:
    full = f" (full K+V: {d.full_bytes_per_token} bytes in {d.dtype})" if d.full_bytes_per_token is not None else ""
    return Table(
        f"{source}-compressions",
        f"each compression, every layer at once, at its bytes per token per layer"
        f"{full}; lossless: |Δloss| ≤ {d.lossless_threshold:.4f} nats{_from(source)}",
        [Column("compression"), Column("K+V per token per layer", "bytes", ".0f"), Column("smaller", fmt="x"), *_error_columns()],
        [[c.method, c.bytes_per_token, c.ratio, *_errors(c)] for c in d.compressions],
        note=" ".join(d.accounting),
    )


def _key_only(d: KvClaimReport, source: str) -> Table | None:
    rows = [[c.method, *_errors(c)] for c in d.key_only]
    if not rows:
        return None
    return Table(
        f"{source}-key-only",
        f"question (1): K alone at rank r, V exact{_from(source)}",
        [Column("compression"), *_error_columns()],
        rows,
    )


def _spectra(d: KvClaimReport, source: str) -> Table:
    ranks = d.ranks or []
    heads = f"mean over {d.n_head} heads" if d.n_head else "mean over heads"
    size = f"; head size {d.d_head}" if d.d_head else ""
    rows = [
        [
            s.layer,
            *s.k_energy,
            *s.v_energy,
            *[s.k_rank_needed.get(x) for x in LEVELS],  # the field is a dict, level -> rank
            *[s.v_rank_needed.get(x) for x in LEVELS],
        ]
        for s in d.spectra
    ]
    return Table(
        f"{source}-spectra",
        f"spectral energy kept at each rank, Σ_{{i≤r}} σᵢ² / Σ σᵢ², {heads}{size}{_from(source)}",
        [
            Column("layer"),
            *[Column(f"K, rank {r}", "%", "pct") for r in ranks],
            *[Column(f"V, rank {r}", "%", "pct") for r in ranks],
            *[Column(f"{what} rank for {x}", fmt="int") for what in "KV" for x in LEVELS],
        ],
        rows,
    )


def _worst_heads(d: KvClaimReport, source: str) -> Table | None:
    """The energy the worst head keeps: a mean over heads can hide one head that needs a higher rank."""
    ranks = d.ranks or []
    if not ranks:
        return None
    return Table(
        f"{source}-spectra-worst-head",
        f"spectral energy kept at each rank by the head that keeps least{_from(source)}",
        [
            Column("layer"),
            *[Column(f"K, rank {r}", "%", "pct") for r in ranks],
            *[Column(f"V, rank {r}", "%", "pct") for r in ranks],
        ],
        [[s.layer, *s.k_energy_min, *s.v_energy_min] for s in d.spectra],
    )


def _after_softmax(d: KvClaimReport, source: str) -> Table | None:
    """Per layer, K and V at each rank with that layer's input exact: KL after softmax and the top-key flips."""
    ranks = d.ranks or []
    by_key = {(a.layer, a.method): a for a in d.attention}
    layers = sorted({layer for layer, _ in by_key})
    if not ranks or not layers:
        return None
    cells: list[list[AttentionRow | None]] = [[by_key.get((layer, f"rank {r}")) for r in ranks] for layer in layers]
    sequences = f" ({d.attention_sequences} sequences)" if d.attention_sequences else ""
    return Table(
        f"{source}-after-softmax",
        f"after softmax, per layer, K and V at rank r (that layer's input exact): "
        f"KL(exact ‖ approximate) per query, and the queries whose most attended key changes{sequences}"
        f"{_from(source)}",
        [
            Column("layer"),
            *[Column(f"KL, rank {r}", "nats", ".3g") for r in ranks],
            *[Column(f"top-key flips, rank {r}", "%", "pct") for r in ranks],
        ],
        [
            [layer, *[a.kl if a else None for a in row], *[a.argmax_flips if a else None for a in row]]
            for layer, row in zip(layers, cells)
        ],
    )


def _budget_row(b: BudgetVerdict) -> list:
    return [b.budget_bytes, b.ratio, b.winner, b.runner_up, b.distinguishable]


def _budgets(d: KvClaimReport, source: str) -> Table | None:
    rows = [_budget_row(b) for b in d.budgets]
    if not rows:
        return None
    return Table(
        f"{source}-budgets",
        f"the best compression at each memory budget{_from(source)}",
        [
            Column("budget", "bytes per token per layer", ".0f"),
            Column("smaller", fmt="x"),
            Column("winner"),
            Column("runner-up"),
            Column("winner beyond noise"),
        ],
        rows,
    )
