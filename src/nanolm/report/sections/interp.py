"""Interpretability: the logit and tuned lens, linear probes and interventions, SAEs, steering.

Each reads the JSON its command prints with --json, which the command also saves in the run under the
names below every time it runs, and the figures the commands save in the run (RUN/figures/, RUN/sae/):
  lens/show.json, lens/eval.json   nanolm lens RUN, nanolm lens eval RUN
  probes/FEATURE.json              nanolm probe RUN (with --intervene: the intervention too)
  sae/NAME/eval.json               nanolm sae eval RUN/sae/NAME (the SAE's own cfg.json is read as saved)
  sae/sweep-L<layer>-<hook>-<arch>.json   nanolm sae sweep RUN
  steering/DIRECTION.json          nanolm steer sweep RUN

Each result's table is laid out once, by a public builder here (``lens_tables``, ``lens_eval_table``,
``probe_table``, ``sae_eval_table``, ``sae_sweep_table``, ``steering_table``) from the result as its command returned it (the
page reads it back from its JSON with RunFiles.record, nanolm.records): the page calls it with the file the result was
read from (appended to the caption, used in the key); the command calls it with its result and "" and draws the
table to the terminal (nanolm.tables.to_rich)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...runs.artifacts import FIGURES, LENS, PROBES, SAE, STEERING, TUNED_LENS, Artifact
from ..model import BY_ROW, Column, Measure, Section, Table, field_table
from ..registry import RunFiles, as_record

if TYPE_CHECKING:  # the results are read when a section is built, not when the report's registry is
    from ...interp.lens import LensResult
    from ...interp.probes import ProbeResult
    from ...interp.sae.metrics import SAEEval
    from ...interp.sae.sweep import Spread
    from ...interp.sae.sweep import SweepResult as SaeSweep
    from ...interp.steering_sweep import Cell
    from ...interp.steering_sweep import SweepResult as SteeringSweep
    from ...interp.tuned_lens import LensEvaluation


def _figures(run: RunFiles, section: Section, kind: Artifact, role: str, caption: str) -> None:
    for path in run.files(kind, role):
        run.figure(section, path, f"{caption} ({run.rel(path)})")


def _named(caption: str, source: str) -> str:
    """The caption with the file it was read from appended ("... (probes/tense.json)"); the terminal has none."""
    return f"{caption} ({source})" if source else caption


def _key(source: str, part: str) -> str:
    """A table's key: the file's name, and the part of it when one file gives several tables; else the part."""
    if not source:
        return part
    return f"{source}-{part}" if part else source


def _count(n: Any) -> str:
    """A count as a caption says it: 12,345; "?" when an older file does not have it."""
    return f"{n:,}" if isinstance(n, int) and not isinstance(n, bool) else "?"


def _shown_token(t: str) -> str:
    """A token bare when it is a plain word, quoted when it has spaces or is empty (so " the" reads as ' the')."""
    return t if t and t == t.strip() and t.isprintable() else repr(t)


# ---- lens ----------------------------------------------------------------------------------------


def lens_section(run: RunFiles, section: Section) -> None:
    run.each_part(section, run.files(LENS, "result"), lambda path, part: _lens_file(run, path, part))
    for path, meta in run.each(section, run.files(TUNED_LENS, "meta"), run.json_object):
        section.tables.append(
            field_table(
                "tuned-lens",
                f"the tuned lens ({run.rel(path.parent)})",
                [
                    ("layers translated", meta.get("n_layers"), "", "int"),
                    ("width", meta.get("d_model"), "", "int"),
                    ("training steps", meta.get("steps"), "", "int"),
                    ("learning rate", meta.get("lr"), "", ".3g"),
                    ("batch", meta.get("batch"), "windows", "int"),
                    ("window", meta.get("block"), "tokens", "int"),
                    ("final training loss: mean KL over layers", meta.get("final_loss"), "nats", ".4f"),
                    ("trained on", meta.get("data"), "", "text"),
                ],
            )
        )
    _figures(run, section, FIGURES, "lens", "lens figure")


def _lens_file(run: RunFiles, path: Path, part: Section) -> None:
    from ...interp.lens import LensResult
    from ...interp.tuned_lens import LensEvaluation

    data = run.json_object(path)
    source = run.rel(path)
    if "logit_lens_kl" in data:
        evaluation = as_record(LensEvaluation, data)
        part.tables.append(lens_eval_table(evaluation, source))
        part.measures += _lens_eval_measures(evaluation)
    elif "cells" in data:
        part.tables += lens_tables(as_record(LensResult, data), source)
    else:
        raise ValueError("neither `nanolm lens --json` nor `nanolm lens eval --json` output")


def lens_kind(r: LensResult) -> str:
    """What read the layers: the tuned lens, the logit lens, or the raw residual projected without the final norm."""
    return "tuned lens" if r.tuned else "logit lens" if r.final_norm else "raw projection"


def lens_tables(r: LensResult, source: str = "") -> list[Table]:
    """The lens (nanolm lens), one table per position shown: per layer its top-1 token and probability, the
    probability and rank it gives the model's own prediction, KL(output ‖ layer), its entropy and its top k."""
    return [_lens_position_table(r, j, pos, source) for j, pos in enumerate(r.positions)]


def _lens_position_table(r: LensResult, j: int, pos: int, source: str) -> Table:
    at = r.tokens[pos] if pos < len(r.tokens) else ""
    k = max((len(cells[j].top_tokens) for cells in r.cells), default=1)
    rows = []
    for layer, cells in zip(r.layers, r.cells):
        c = cells[j]
        tops = "  ".join(f"{_shown_token(t)} {p:.0%}" for t, p in zip(c.top_tokens, c.top_probs))
        rows.append([layer, tops, c.final_token_prob, c.final_token_rank, c.kl_final, c.entropy])
    # the key keeps the page's old ids ("lens-show-json-5") so a link to a position still lands there
    return Table(
        _key(source, str(pos)) if source else f"position-{pos}",
        _named(f"{lens_kind(r)} on {r.prompt!r} at position {pos} ({at!r}): the model predicts {r.final_tokens[j]!r}", source),
        [
            Column("layer"),
            Column(f"top {k}, with p"),
            Column("p(model's token)", "%", "pct", "p(out)"),
            Column("rank of model's token", fmt="int", short="rank"),
            Column("KL(output ‖ layer)", "nats", ".3f", "KL"),
            Column("entropy", "nats", ".3f", "H"),
        ],
        rows,
    )


def lens_eval_table(e: LensEvaluation, source: str = "") -> Table:
    """The logit lens against the tuned lens (nanolm lens eval): KL(final ‖ lens) per layer, and their ratio."""
    return Table(
        _key(source, "") or "eval",
        _named(f"KL(final ‖ lens) per layer on {e.tokens} held-out tokens", source),
        [
            Column("layer"),
            Column("logit lens", "nats", ".4f"),
            Column("tuned lens", "nats", ".4f"),
            Column("tuned / logit", fmt=".2f"),
        ],
        [list(r) for r in zip(e.layers, e.logit_lens_kl, e.tuned_lens_kl, e.ratios)],
        note="the last layer is the output itself: both KLs are 0 there",
    )


def _lens_eval_measures(e: LensEvaluation) -> list[Measure]:
    out = []
    for layer, a, b in list(zip(e.layers, e.logit_lens_kl, e.tuned_lens_kl))[:-1]:
        out += [
            Measure(f"logit-lens KL, layer {layer}", a, "nats", "lower", ".4f"),
            Measure(f"tuned-lens KL, layer {layer}", b, "nats", "lower", ".4f"),
        ]
    return out


# ---- probes and interventions ----------------------------------------------------------------------


def _probe(run: RunFiles, path: Path) -> ProbeResult:
    from ...interp.probes import ProbeResult

    return run.record(path, ProbeResult, "feature", "layers")


def probe_section(run: RunFiles, section: Section) -> None:
    run.each_part(section, run.files(PROBES, "result"), lambda path, part: _probe_file(run, path, part))
    _figures(run, section, FIGURES, "probe", "probe accuracy per layer")


def _probe_file(run: RunFiles, path: Path, section: Section) -> None:
    r = _probe(run, path)
    section.tables.append(probe_table(r, run.rel(path)))
    section.measures += [
        Measure(f"probe {r.feature}: held-out accuracy, layer {p.layer}", p.accuracy, "%", "higher", "pct") for p in r.layers
    ]
    section.lines += [f"{r.feature}: {w}" for w in r.warnings]


def best_probe_layer(r: ProbeResult) -> str | None:
    """The most selective layer (the first of equals); None when no layer's selectivity is a number."""
    layers = [p for p in r.layers if isinstance(p.selectivity, (int, float))]
    return max(layers, key=lambda p: p.selectivity).layer if layers else None


def probe_table(r: ProbeResult, source: str = "") -> Table:
    """A linear probe per layer (nanolm probe): held-out accuracy with its interval beside the majority rate,
    the control task and the selectivity, and the train accuracy; the most selective layer in bold."""
    title = f'"{r.feature}" ({Path(r.source).name})' if r.source else r.feature  # a file's feature, quoted
    where = {"last": "last token", "mean": "mean over tokens"}.get(r.position, f"{r.position} token")
    best = best_probe_layer(r)
    used = "see the intervention" if r.intervention else "nanolm probe --intervene tests that"
    return Table(
        _key(source, ""),
        _named(f"linear probe for {title}: {r.n} examples, {where}, control: random labels per {r.control}", source),
        [
            Column("layer"),
            Column("held-out accuracy", "%", "pct", "acc"),
            Column("95% CI", "%", "pct"),
            Column("majority rate", "%", "pct", "majority"),
            Column("control accuracy", "%", "pct", "control"),
            Column("selectivity (acc − control)", "%", "pct", "sel."),
            Column("train accuracy", "%", "pct", "train"),
            Column("train / held-out", "examples", "text", "n"),
        ],
        [
            [
                p.layer,
                p.accuracy,
                p.accuracy_ci,
                p.majority,
                p.control_accuracy,
                p.selectivity,
                p.train_accuracy,
                f"{p.n_train} / {p.n_test}",
            ]
            for p in r.layers
        ],
        note=(f"best layer (most selective), in bold: {best}. " if best is not None else "")
        + f"High held-out accuracy says the feature is readable, not that the model uses it: {used}.",
        bold_rows=[i for i, p in enumerate(r.layers) if p.layer == best],
    )


def intervention_section(run: RunFiles, section: Section) -> None:
    run.each_part(section, run.files(PROBES, "result"), lambda path, part: _intervention(run, path, part))


def _intervention(run: RunFiles, path: Path, section: Section) -> None:
    from ...interp.probes import ProbeResult

    data = run.json_object(path, "feature", "layers")
    if not data.get("intervention"):
        return  # a probe without --intervene: nothing here (a damaged probe is the probe section's to name, once)
    r = as_record(ProbeResult, data)
    iv = r.intervention
    if iv is None:
        return
    beaten = sum(abs(x) < abs(iv.delta) for x in iv.random_deltas)
    section.tables.append(
        field_table(
            run.rel(path),
            f"erasing {r.feature} at layer {iv.layer} ({run.rel(path)})",
            [
                ("method", iv.method, "", "text"),
                ("directions removed", iv.rank, "", "int"),
                ("measure", iv.measure, "", "text"),
                ("texts scored", iv.scored, "", "int"),
                ("without the edit", iv.base, "nats", ".4f"),
                ("feature erased", iv.erased, "nats", ".4f"),
                ("change", iv.delta, "nats", ".4f"),
                ("random edits of the same size: mean change", _mean(iv.random_deltas), "nats", ".4f"),
                ("random edits beaten", f"{beaten} of {len(iv.random_deltas)}", "", "text"),
                ("p-value", iv.p_value, "", ".3f"),
                ("effect-size floor", iv.min_effect, "nats", ".3f"),
                ("mean edit size ‖Δx‖", iv.edit_norm, "", ".3g"),
                ("target preferred, before", iv.preference_base, "%", "pct"),
                ("target preferred, erased", iv.preference_erased, "%", "pct"),
                ("fresh probe on erased activations", iv.probe_accuracy_after, "%", "pct"),
                ("verdict", str(iv.verdict), "", "text"),
            ],
        )
    )
    section.lines.append(f"{r.feature} at layer {iv.layer}: {iv.verdict}: {iv.reason}")
    section.measures.append(Measure(f"erasing {r.feature} at layer {iv.layer}: change", iv.delta, "nats", None, ".4f"))


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


# ---- SAEs ----------------------------------------------------------------------------------------

# An SAE's evaluation, in table order: (key, field, unit, format, which way is better, definition). The definitions
# are formatted with the evaluation's own counts ({window}: tokens evaluated, {positions}: with a next token).
SAE_ROWS = [
    ("l0", "L0: active latents per token", "latents", ".2f", "lower", "mean over tokens of the number of latents with f > 0"),
    ("mse", "MSE", "activation units²", ".4g", "lower", "mean over tokens and dimensions of (x - x̂)², raw activation units"),
    (
        "fvu",
        "FVU: variance unexplained (about the mean)",
        "%",
        "pct",
        "lower",
        "Σ‖x - x̂‖² / Σ‖x - x̄‖², about the mean x̄ of the evaluated tokens",
    ),
    ("dead", "dead latents", "latents", "int", "lower", "no f > 0 on any of the {window} evaluated tokens"),
    ("dense", "dense latents (> 10% of tokens)", "latents", "int", None, "f > 0 on more than 10% of the evaluated tokens"),
    ("d_sae", "latents (M)", "latents", "int", None, "the SAE's width"),
    ("ce_clean", "CE, clean", "nats", ".4f", None, "mean next-token cross entropy over {positions} positions"),
    ("ce_spliced", "CE, SAE spliced in", "nats", ".4f", "lower", "the same with x̂ in place of x at the hook"),
    ("ce_zero_ablated", "CE, zero-ablated", "nats", ".4f", None, "the same with zeros in place of x"),
    ("ce_mean_ablated", "CE, mean-ablated", "nats", ".4f", None, "the same with x̄ at every position"),
    (
        "ce_recovered_zero",
        "CE loss recovered vs zero ablation",
        "%",
        "pct",
        "higher",
        "(CE_zero - CE_spliced) / (CE_zero - CE_clean)",
    ),
    (
        "ce_recovered_mean",
        "CE loss recovered vs mean ablation",
        "%",
        "pct",
        "higher",
        "(CE_mean - CE_spliced) / (CE_mean - CE_clean)",
    ),
    ("kl", "KL(clean ‖ spliced)", "nats/position", ".4f", "lower", "mean over positions of KL(clean ‖ spliced)"),
]
_NOT_MEASURED = {"d_sae", "ce_zero_ablated", "ce_mean_ablated"}  # the table's context, not a result to compare
SAE_METRICS = [row[:5] for row in SAE_ROWS if row[0] not in _NOT_MEASURED]  # the page's measures


def sae_section(run: RunFiles, section: Section) -> None:
    saes = list(run.each(section, run.files(SAE, "cfg"), lambda p: run.json_object(p, "d_in", "d_sae")))
    if saes:
        section.tables.append(
            Table(
                "saes",
                "the run's SAEs",
                [
                    Column("SAE"),
                    Column("hook"),
                    Column("architecture"),
                    Column("D", fmt="int"),
                    Column("M", fmt="int"),
                    Column("K", fmt="int"),
                    Column("λ (L1)", fmt=".3g"),
                    Column("training steps", fmt="int"),
                    Column("training tokens", "tokens", "int"),
                ],
                [
                    [
                        p.parent.name,
                        c.get("hook_name"),
                        c.get("architecture"),
                        c["d_in"],
                        c["d_sae"],
                        c.get("k"),
                        _own(c).get("l1"),
                        _own(c).get("steps"),
                        _own(c).get("tokens"),
                    ]
                    for p, c in saes
                ],
            )
        )
    run.each_part(section, run.files(SAE, "eval"), lambda path, part: _sae_eval(run, path, part))
    run.each_part(section, run.files(SAE, "sweep"), lambda path, part: _sae_sweep(run, path, part))
    _figures(run, section, SAE, "density", "latent firing densities")
    _figures(run, section, SAE, "sweep_plot", "the L0–FVU and L0–CE-recovered frontiers")


def _sae_eval(run: RunFiles, path: Path, section: Section) -> None:
    from ...interp.sae.metrics import SAEEval

    ev = run.record(path, SAEEval, "l0", "fvu")
    name = path.parent.name
    section.tables.append(sae_eval_table(ev, name, run.rel(path)))
    section.measures += [
        Measure(f"SAE {name}: {label}", getattr(ev, k), unit, better, fmt)
        for k, label, unit, fmt, better in SAE_METRICS
        if getattr(ev, k) is not None
    ]


def _sae_sweep(run: RunFiles, path: Path, part: Section) -> None:
    from ...interp.sae.sweep import SweepResult

    part.tables.append(sae_sweep_table(run.record(path, SweepResult, "per_value", "knob"), run.rel(path)))


def sae_eval_table(ev: SAEEval, name: str, source: str = "") -> Table:
    """An SAE on held-out tokens (nanolm sae eval): each metric with its unit and its definition. `name`: the SAE's
    folder (the page: the file's, SAE/eval.json; the terminal: the folder the command was given). A metric saved
    as null (NaN: ablating cost nothing) is left out."""
    counts = {"window": _count(ev.dead_window), "positions": _count(ev.positions)}
    kept = [
        (label, getattr(ev, k), unit, fmt, define.format(**counts))
        for k, label, unit, fmt, _, define in SAE_ROWS
        if getattr(ev, k) is not None
    ]
    hook = f" at {ev.hook}" if ev.hook else ""
    texts = f" of {_count(ev.texts)} texts" if ev.texts is not None else ""
    # the page's key since it had one: eval-NAME
    return Table(
        f"eval-{name}" if source else "eval",
        _named(f"SAE {name}{hook}: {_count(ev.tokens)} held-out tokens{texts}", source),
        [Column("field"), Column("value", fmt=BY_ROW), Column("unit"), Column("definition")],
        [[label, value, "" if fmt.startswith("pct") else unit, define] for label, value, unit, fmt, define in kept],
        note="CE loss recovered: 100% = the SAE loses nothing, 0% = no better than ablating the activation",
        row_formats=[fmt for _, _, _, fmt, _ in kept],
    )


def _own(cfg: dict) -> dict:
    """nanolm's training record inside an SAE's cfg.json."""
    own = cfg.get("nanolm")
    return (own.get("extra") or {}) if isinstance(own, dict) else {}


def _spread(s: Spread) -> list[Any]:
    """A metric over seeds as two cells: its median and its (min, max); nothing when every seed failed (n = 0)."""
    if s.n == 0:
        return [None, None]
    return [s.median, (s.min, s.max)]


def sae_sweep_table(r: SaeSweep, source: str = "") -> Table:
    """An SAE per value × seed (nanolm sae sweep): per value of λ or K the median and min–max over seeds of
    L0, FVU and the CE loss recovered against zero and mean ablation: the frontier with its seed spread."""
    knob = "λ" if r.knob == "l1" else "K"
    rows = [
        [v.value, *_spread(v.l0), *_spread(v.fvu), *_spread(v.ce_recovered_zero), *_spread(v.ce_recovered_mean)]
        for v in r.per_value
    ]
    data = (
        f", trained on the same {_count(r.tokens)} tokens, evaluated on {_count(r.eval_tokens)} held-out "
        f"tokens ({_count(r.eval_texts)} texts)"
    )
    return Table(
        _key(source, "") or "sweep",
        _named(f"frontier: {r.arch} SAEs at {r.hook}, M = {r.d_sae}, {len(r.seeds)} seed(s) per {knob}{data}", source),
        [
            Column(knob, fmt=".4g"),
            Column("L0, median", "latents", ".2f", "L0"),
            Column("L0, min–max", "latents", ".2f", "L0 range"),
            Column("FVU, median", "%", "pct", "FVU"),
            Column("FVU, min–max", "%", "pct", "FVU range"),
            Column("CE recovered (zero abl.), median", "%", "pct", "CE zero"),
            Column("CE recovered, min–max", "%", "pct", "CE zero range"),
            Column("CE recovered (mean abl.), median", "%", "pct", "CE mean"),
            Column("CE recovered (mean abl.), min–max", "%", "pct", "CE mean range"),
        ],
        rows,
        note="neighbouring values differ beyond the seed spread only where their min–max ranges are disjoint",
    )


# ---- steering --------------------------------------------------------------------------------------


def steering_section(run: RunFiles, section: Section) -> None:
    run.each_part(section, run.files(STEERING, "sweep"), lambda path, part: _steering(run, path, part))
    _figures(run, section, FIGURES, "steer", "behaviour and fluency over α × layer")


def _steering(run: RunFiles, path: Path, section: Section) -> None:
    from ...interp.steering_sweep import SweepResult

    d = run.record(path, SweepResult, "cells", "unsteered", "direction")
    section.tables.append(steering_table(d, run.rel(path)))
    best = d.best
    section.lines.append(
        f"{d.direction}: " + (f"best cell layer {best.layer}, α {best.alpha:g}: " if best else "no best cell: ") + d.best_reason
    )
    section.lines += [
        f"layer {layer}: the text falls apart from α = {a:g}" for layer, a in d.falls_apart.items() if a is not None
    ]
    if best:
        section.measures.append(Measure(f"steering {d.direction}: best change", best.change, "points", "higher", ".3f"))


def _seed_range(xs: list[float | None]) -> tuple[float, float] | None:
    """(min, max) over seeds of the finite values (NaN is saved as null); None with fewer than two (nothing spread)."""
    finite = [x for x in xs if x is not None and math.isfinite(x)]
    return (min(finite), max(finite)) if len(finite) >= 2 else None


def _best_row(cells: list[Cell], best: Cell | None) -> list[int]:
    """The row of the best cell (among the steered cells: the first row, unsteered, never is)."""
    if best is None:
        return []
    found = [i for i, c in enumerate(cells) if i > 0 and c.layer == best.layer and c.alpha == best.alpha]
    return found[:1]


def steering_table(d: SteeringSweep, source: str = "") -> Table:
    """A steering sweep (nanolm steer sweep): per layer × α the behaviour, its change from unsteered, the
    fluency (KL on neutral text, perplexity, distinct-2), whether the text falls apart, with the next-word log-odds
    (sentiment) and the spread over seeds (with several); the best cell within the KL bound in bold."""
    sentiment = d.metric == "sentiment"
    metric = "happy share" if sentiment else "p(matching)"
    spread = len(d.seeds) > 1
    cells = [d.unsteered, *d.cells]
    columns = [
        Column("layer"),
        Column("α", fmt=".3g"),
        Column("‖αv̂‖", fmt=".3g"),
        Column(metric, "%", "pct"),
        Column("change", "points", ".3f"),
        Column("KL(unsteered ‖ steered)", "nats", ".3f", "KL"),
        Column("perplexity", "", ".3g", "ppl"),
        Column("distinct-2", "%", "pct", "d-2"),
        Column("falls apart", short="broken"),
    ]
    columns += [Column("next-word log-odds, happy vs sad", fmt=".2f", short="log-odds")] if sentiment else []
    columns += (
        [
            Column(f"{metric}, min–max over seeds", "%", "pct", "range"),
            Column("perplexity, min–max over seeds", "", ".3g", "ppl range"),
            Column("distinct-2, min–max over seeds", "%", "pct", "d-2 range"),
        ]
        if spread
        else []
    )
    columns += [Column("example")]
    rows = []
    for c in cells:
        row = [c.layer, c.alpha, c.added_norm, c.behaviour, c.change, c.kl, c.perplexity, c.distinct2, c.fallen_apart]
        row += [c.log_odds] if sentiment else []
        row += [_seed_range(xs) for xs in (c.behaviour_seeds, c.perplexity_seeds, c.distinct2_seeds)] if spread else []
        rows.append([*row, c.example])
    return Table(
        _key(source, "") or "sweep",
        _named(
            f"steering with {d.direction} ({d.scale} scale), {len(d.seeds)} seed(s) × "
            f"{len(d.prompts)} prompts × {d.max_new_tokens} new tokens",
            source,
        ),
        columns,
        rows,
        note=f"fluency bound for the best cell (in bold): KL ≤ {d.max_kl} nats; the first row is unsteered",
        bold_rows=_best_row(cells, d.best),
    )
