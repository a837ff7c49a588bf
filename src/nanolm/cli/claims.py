"""``nanolm claims kv``: a thin click command over nanolm.research.kv_claims. Heavy imports happen inside."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import UserError
from .output import (
    SEED,
    OutputFile,
    check_count,
    check_report,
    console,
    count,
    emit,
    json_option,
    progress_bar,
    report_option,
    runs_dir_option,
    write_run_report,
)

if TYPE_CHECKING:
    from ..research.kv_claims import KvClaimReport

MAX_SEQUENCES = 10_000  # held-out sequences (64 by default), each read once per compression
MAX_LENGTH = 100_000  # tokens per sequence (256 by default, or the context)
MAX_SIZE = 65_536  # a rank, bit width or group size: past any head's width or count here (the run's own are checked)


@click.group()
def claims() -> None:
    """Check a paper's claim by measurement (the reference's three questions)."""


@claims.command("kv")
@click.argument("model", metavar="RUN_OR_PATH")
@click.option("--ranks", help="Ranks r of the truncated SVD of K and V (default 4,8,16,32, those that fit in a head).")
@click.option("--bits", default="8,4", show_default=True, help="Bit widths of the quantized cache (2, 4 or 8).")
@click.option("--groups", help="Group sizes g of grouped-query sharing (default: every size that divides the heads).")
@click.option(
    "--data",
    "data_file",
    type=click.Path(path_type=Path),
    help="Held-out UTF-8 text, tokenized with the run's tokenizer (default: the run's validation split).",
)
@click.option(
    "--sequences",
    type=count(MAX_SEQUENCES, "held-out sequences here", min=2),
    default=64,
    show_default=True,
    help="Held-out sequences (the loss's noise is measured across them).",
)
@click.option(
    "--length",
    type=count(MAX_LENGTH, "tokens per sequence here"),
    help="Tokens per sequence (default 256, or the context if shorter).",
)
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the bootstrap.")
@click.option("--note", help="Question 3 (prior work): your note, stored in the report.")
@click.option(
    "--out", type=OutputFile("kv.json", ".json"), help="Also write the report here (it is always written to RUN/claims/kv.json)."
)
@runs_dir_option
@report_option
@json_option
def kv(
    model: str,
    ranks: str | None,
    bits: str,
    groups: str | None,
    data_file: Path | None,
    sequences: int,
    length: int | None,
    seed: int,
    note: str | None,
    out: Path | None,
    runs_dir: str,
    report: bool,
    json_out: bool,
) -> None:
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
    parsed = {
        name: _int_list(text, name)
        for name, text in (("--ranks", ranks), ("--bits", bits), ("--groups", groups))
        if text is not None
    }
    with progress_bar("measuring K and V, then the loss under each compression") as advance:
        result = check_run(
            model,
            runs_dir,
            data_file=data_file,
            ranks=parsed.get("--ranks"),
            bits=parsed.get("--bits", []),
            groups=parsed.get("--groups"),
            sequences=sequences,
            length=length,
            seed=seed,
            note=note,
            progress=advance,
        )
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
    emit(
        result,
        lambda r: render(r, targets),
        json_out,
        warnings,
        as_json={**result.to_dict(), "saved_to": [str(p) for p in targets]},
    )
    if report:
        write_run_report(result.run_dir)


def _int_list(text: str, option: str) -> list[int]:
    """ "4,8,16" -> [4, 8, 16]; "" -> [] (none of that family); each at most MAX_SIZE."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            value = int(part)
        except ValueError:
            raise UserError(f"{option} {text}: {part!r} is not a whole number; e.g. {option} 4,8,16") from None
        out.append(check_count(value, option, MAX_SIZE))
    return out


# ---- rendering ----------------------------------------------------------------------------------


def render(report: KvClaimReport, saved: list[Path]) -> None:
    """The measurement in a line, the tables the run's page shows too (laid out once, in
    nanolm.report.sections.research), the verdict and the three questions' answers, and where the report went."""
    from rich.markup import escape

    from ..io import to_jsonable
    from ..report.sections.research import kv_claim_tables
    from ..research.kv_claims import KvClaimReport as Report
    from ..tables import to_rich

    out = console()
    out.print(
        escape(
            f"{report.model}: {report.sequences} x {report.tokens_per_sequence} tokens of {report.data}; loss "
            f"{report.loss:.4f} nats, bootstrap SE over sequences {report.loss_se:.4f}"
        )
    )
    for table in kv_claim_tables(Report.from_dict(to_jsonable(report))):  # as the page reads the JSON it saves
        out.print(to_rich(table))
    out.print("[bold]verdict[/bold]")
    for line in report.verdict:
        out.print(escape(f"  • {line}"))
    for i, q in enumerate(report.questions, start=1):
        out.print(f"[bold]{i}. {escape(q.question)}[/bold]")
        for line in q.answer:
            out.print(escape(f"  {line}"))
    for path in saved:
        out.print(escape(f"report: {path}"), style="dim")
