"""Research craft: a paper's claim checked by measurement.

Reads the JSON `nanolm claims kv RUN` saves in the run every time it runs (its `--json` output):
  claims/kv.json, claims/kv-<file>.json   nanolm claims kv RUN [--data FILE]"""

from __future__ import annotations

from pathlib import Path

from ...runs.artifacts import CLAIMS
from ..model import Column, Measure, Section, Table
from ..registry import RunFiles


def claims_section(run: RunFiles, section: Section) -> None:
    run.each_part(section, run.files(CLAIMS, "kv"), lambda path, part: _kv_claim(run, path, part))


def _kv_claim(run: RunFiles, path: Path, part: Section) -> None:
    d = run.json_object(path, "compressions", "spectra", "questions", "verdict", "loss", "lossless_threshold")
    where = run.rel(path)
    part.lines.append(f"KV-cache compression on {d.get('sequences', '?')} × {d.get('tokens_per_sequence', '?')} tokens "
                      f"of {d.get('data', '?')} ({where}): the exact model's loss {d['loss']:.4f} nats per token; "
                      f"\"lossless\" means |Δloss| ≤ {d['lossless_threshold']:.4f} nats (2 standard errors of the evaluation).")
    for q in d["questions"]:
        part.lines.append(f"{q['question']} " + " ".join(q["answer"]))
    rows = []
    for c in d["compressions"]:
        rows.append([c["method"], c["bytes_per_token"], c["ratio"], c["kl"], c["argmax_flips"], c["key_error"],
                     c["output_error"], c["delta_loss"], list(c["delta_ci"]), c["lossless"]])
        part.measures.append(Measure(f"Δloss with the KV cache compressed: {c['method']}", c["delta_loss"], "nats",
                                     "lower", ".4f"))
    part.tables.append(Table(f"{where}-compressions", f"each compression at its bytes per token per layer ({where})", [
        Column("compression"), Column("K+V per token per layer", "bytes", ".0f"), Column("smaller", fmt="x"),
        Column("KL(exact ‖ approx attention)", "nats", ".3g"), Column("top-key flips", "%", "pct"),
        Column("‖ΔK‖/‖K‖", "%", "pct"), Column("‖Δy‖/‖y‖", "%", "pct"), Column("Δloss", "nats", ".4f"),
        Column("paired 95% CI", "nats", ".4f"), Column("lossless")], rows,
        note=" ".join(d.get("accounting", []))))
    key_rows = [[c["method"], c["kl"], c["argmax_flips"], c["key_error"], c["output_error"], c["delta_loss"],
                 list(c["delta_ci"]), c["lossless"]] for c in d.get("key_only", [])]
    if key_rows:
        part.tables.append(Table(f"{where}-key-only", f"question (1): K alone at rank r, V exact ({where})", [
            Column("compression"), Column("KL(exact ‖ approx attention)", "nats", ".3g"),
            Column("top-key flips", "%", "pct"), Column("‖ΔK‖/‖K‖", "%", "pct"), Column("‖Δy‖/‖y‖", "%", "pct"),
            Column("Δloss", "nats", ".4f"), Column("paired 95% CI", "nats", ".4f"), Column("lossless")], key_rows))
    ranks = d.get("ranks") or []
    levels = ("70%", "90%", "99%")
    spectrum_rows = [[s["layer"], *s["k_energy"], *s["v_energy"], *[s["k_rank_needed"].get(x) for x in levels],
                      *[s["v_rank_needed"].get(x) for x in levels]] for s in d["spectra"]]
    part.tables.append(Table(f"{where}-spectra", f"spectral energy kept at each rank, mean over heads ({where})", [
        Column("layer"), *[Column(f"K, rank {r}", "%", "pct") for r in ranks],
        *[Column(f"V, rank {r}", "%", "pct") for r in ranks],
        *[Column(f"{what} rank for {x}", fmt="int") for what in "KV" for x in levels]], spectrum_rows))
    budget_rows = [[b["budget_bytes"], b["ratio"], b["winner"], b.get("runner_up"), b["distinguishable"]]
                   for b in d.get("budgets", [])]
    if budget_rows:
        part.tables.append(Table(f"{where}-budgets", f"the best compression at each memory budget ({where})", [
            Column("budget", "bytes per token per layer", ".0f"), Column("smaller", fmt="x"), Column("winner"),
            Column("runner-up"), Column("winner beyond noise")], budget_rows))
    part.lines.extend(d["verdict"])
    if d.get("note"):
        part.lines.append(f"Note: {d['note']}")
