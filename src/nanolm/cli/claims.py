"""``nanolm claims kv``: a thin click command over nanolm.research.kv_claims. Heavy imports happen inside."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import UserError
from .output import (
    OutputFile,
    check_report,
    console,
    emit,
    json_option,
    progress_bar,
    report_option,
    runs_dir_option,
    write_run_report,
)

if TYPE_CHECKING:
    from rich.table import Table

    from ..research.kv_claims import KvClaimReport


@click.group()
def claims() -> None:
    """Check a paper's claim by measurement (the reference's three questions)."""


@claims.command("kv")
@click.argument("model", metavar="RUN_OR_PATH")
@click.option("--ranks", help="Ranks r of the truncated SVD of K and V (default 4,8,16,32, those that fit in a head).")
@click.option("--bits", default="8,4", show_default=True, help="Bit widths of the quantized cache (2, 4 or 8).")
@click.option("--groups", help="Group sizes g of grouped-query sharing (default: every size that divides the heads).")
@click.option("--data", "data_file", type=click.Path(path_type=Path),
              help="Held-out UTF-8 text, tokenized with the run's tokenizer (default: the run's validation split).")
@click.option("--sequences", type=click.IntRange(min=2), default=64, show_default=True,
              help="Held-out sequences (the loss's noise is measured across them).")
@click.option("--length", type=click.IntRange(min=1), help="Tokens per sequence (default 256, or the context if shorter).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the bootstrap.")
@click.option("--note", help="Question 3 (prior work): your note, stored in the report.")
@click.option("--out", type=OutputFile("kv.json", ".json"),
              help="Also write the report here (it is always written to RUN/claims/kv.json).")
@runs_dir_option
@report_option
@json_option
def kv(model: str, ranks: str | None, bits: str, groups: str | None, data_file: Path | None, sequences: int,
       length: int | None, seed: int, note: str | None, out: Path | None, runs_dir: str, report: bool,
       json_out: bool) -> None:
    """Is "compress the KV cache 8x losslessly, as guaranteed by Eckart–Young" true of this model?

    \b
    nanolm claims kv RUN                          the run's validation split, 64 x 256 tokens
    nanolm claims kv RUN --ranks 8,16 --bits 4 --groups 2 --data held_out.txt

    Records K and V of every layer and head; reports the spectral energy kept at each rank, what a rank-r K
    and V do after softmax and to the loss, and the baselines at equal memory (bytes per token per layer):
    b-bit quantization (keys per channel, values per token) and grouped-query sharing. "Lossless" means
    |Δloss| within 2 standard errors of the evaluation (bootstrap over the sequences).
    """
    from ..research.kv_claims import check_run, default_report_path, save_report

    if report:
        from ..runs import resolve_run

        check_report(report, resolve_run(model, runs_dir))
    parsed = {name: _int_list(text, name) for name, text in (("--ranks", ranks), ("--bits", bits), ("--groups", groups))
              if text is not None}
    with progress_bar("measuring K and V, then the loss under each compression") as advance:
        result = check_run(model, runs_dir, data_file=data_file, ranks=parsed.get("--ranks"), bits=parsed.get("--bits", []),
                           groups=parsed.get("--groups"), sequences=sequences, length=length, seed=seed, note=note,
                           progress=advance)
    warnings = list(result.notes)
    targets = []
    for where in ([result.run_dir] if result.run_dir else []) + ([out] if out else []):
        try:  # a run that cannot be written to loses the saved copy, not the minute of measurement
            path = where if where is out else default_report_path(where, data_file)
            if path.exists():
                warnings.append(f"replaced {path}")
            targets.append(save_report(result, path))
        except (UserError, OSError) as e:
            warnings.append(f"the report was not saved at {where}: {e}")
    emit(result, lambda r: render(r, targets), json_out, warnings,
         as_json={**result.to_dict(), "saved_to": [str(p) for p in targets]})
    if report:
        write_run_report(result.run_dir)


def _int_list(text: str, option: str) -> list[int]:
    """"4,8,16" -> [4, 8, 16]; "" -> [] (none of that family)."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            out.append(int(part))
        except ValueError:
            raise UserError(f"{option} {text}: {part!r} is not a whole number; e.g. {option} 4,8,16") from None
    return out


# ---- rendering ----------------------------------------------------------------------------------

def _pct(x: float) -> str:
    return f"{x:.1%}"


def spectrum_table(report: KvClaimReport) -> Table:
    """Energy kept per layer at each rank (mean over heads, the worst head in brackets), and the ranks needed."""
    from rich.table import Table

    t = Table(title=f"spectral energy kept, Σ_{{i≤r}} σᵢ² / Σ σᵢ² (mean over {report.n_head} heads; the worst head); "
                    f"head size {report.d_head}")
    t.add_column("layer", justify="right")
    for what in ("K", "V"):
        for r in report.ranks:
            t.add_column(f"{what} r={r}", justify="right")
        t.add_column(f"{what} rank for 70·90·99%", justify="right")
    for s in report.spectra:
        cells = [str(s.layer)]
        for mean, worst, needed in ((s.k_energy, s.k_energy_min, s.k_rank_needed), (s.v_energy, s.v_energy_min,
                                                                                   s.v_rank_needed)):
            cells += [f"{m:.0%} ({w:.0%})" for m, w in zip(mean, worst)]
            cells.append(" · ".join(str(n) for n in needed.values()))
        t.add_row(*cells)
    return t


def softmax_table(report: KvClaimReport) -> Table:
    """KL and top-key flips per layer for each rank (that layer's input exact)."""
    from rich.table import Table

    t = Table(title=f"after softmax, per layer, K and V at rank r: KL(exact ‖ approximate) nats per query, and the "
                    f"queries whose most attended key changes ({report.attention_sequences} sequences)")
    t.add_column("layer", justify="right")
    for r in report.ranks:
        t.add_column(f"KL r={r}", justify="right")
    for r in report.ranks:
        t.add_column(f"flips r={r}", justify="right")
    by_key = {(a.layer, a.method): a for a in report.attention}
    for layer in range(report.n_layer):
        rows = [by_key[layer, f"rank {r}"] for r in report.ranks]
        t.add_row(str(layer), *[f"{a.kl:.3g}" for a in rows], *[_pct(a.argmax_flips) for a in rows])
    return t


def compression_table(report: KvClaimReport) -> Table:
    """Every compression, all layers at once: bytes, errors, the loss change and whether it is lossless."""
    from rich.table import Table

    t = Table(title=f"at equal memory: bytes per token per layer (full K+V: {report.full_bytes_per_token} B in "
                    f"{report.dtype}); every layer compressed; lossless = |Δloss| ≤ {report.lossless_threshold:.4f}")
    for col in ("compression", "B/token/layer", "smaller", "KL", "top-key flips", "‖ΔK‖/‖K‖", "‖Δy‖/‖y‖",
                "Δloss (nats)", "paired 95% CI", "lossless"):
        t.add_column(col, justify="left" if col == "compression" else "right", no_wrap=True)
    for c in report.compressions:
        t.add_row(c.method, f"{c.bytes_per_token:g}", f"{c.ratio:.2f}×", f"{c.kl:.3g}", _pct(c.argmax_flips),
                  _pct(c.key_error), _pct(c.output_error), f"{c.delta_loss:+.4f}",
                  f"{c.delta_ci[0]:+.4f} … {c.delta_ci[1]:+.4f}", "yes" if c.lossless else "no")
    return t


def render(report: KvClaimReport, saved: list[Path]) -> None:
    from rich.markup import escape

    out = console()
    out.print(escape(f"{report.model}: {report.sequences} x {report.tokens_per_sequence} tokens of {report.data}; loss "
                     f"{report.loss:.4f} nats, bootstrap SE over sequences {report.loss_se:.4f}"))
    if report.ranks:
        out.print(spectrum_table(report))
        out.print(softmax_table(report))
    out.print(compression_table(report))
    for line in report.accounting:
        out.print(escape(f"  bytes, {line}"), style="dim")
    out.print("[bold]verdict[/bold]")
    for line in report.verdict:
        out.print(escape(f"  • {line}"))
    for i, q in enumerate(report.questions, start=1):
        out.print(f"[bold]{i}. {escape(q.question)}[/bold]")
        for line in q.answer:
            out.print(escape(f"  {line}"))
    for path in saved:
        out.print(escape(f"report: {path}"), style="dim")
