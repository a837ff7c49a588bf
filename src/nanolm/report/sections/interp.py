"""Interpretability: the logit and tuned lens, linear probes and interventions, SAEs, steering.

Each reads the JSON its command prints with --json, which the command also saves in the run under the
names below every time it runs, and the figures the commands save in the run (RUN/figures/, RUN/sae/):
  lens/show.json, lens/eval.json   nanolm lens RUN, nanolm lens eval RUN
  probes/FEATURE.json              nanolm probe RUN (with --intervene: the intervention too)
  sae/NAME/eval.json               nanolm sae eval RUN/sae/NAME (the SAE's own cfg.json is read as saved)
  sae/sweep-L<layer>-<hook>-<arch>.json   nanolm sae sweep RUN
  steering/DIRECTION.json          nanolm steer sweep RUN"""

from __future__ import annotations

from pathlib import Path

from ...runs.artifacts import FIGURES, LENS, PROBES, SAE, STEERING, TUNED_LENS, Artifact
from ..model import Column, Measure, Section, Table, field_table
from ..registry import RunFiles


def _figures(run: RunFiles, section: Section, kind: Artifact, role: str, caption: str) -> None:
    for path in run.files(kind, role):
        run.figure(section, path, f"{caption} ({run.rel(path)})")


# ---- lens ----------------------------------------------------------------------------------------

def lens_section(run: RunFiles, section: Section) -> None:
    run.each_part(section, run.files(LENS, "result"), lambda path, part: _lens_file(run, path, part))
    for path, meta in run.each(section, run.files(TUNED_LENS, "meta"), run.json_object):
        section.tables.append(field_table("tuned-lens", f"the tuned lens ({run.rel(path.parent)})", [
            ("layers translated", meta.get("n_layers"), "", "int"), ("width", meta.get("d_model"), "", "int"),
            ("training steps", meta.get("steps"), "", "int"), ("learning rate", meta.get("lr"), "", ".3g"),
            ("batch", meta.get("batch"), "windows", "int"), ("window", meta.get("block"), "tokens", "int"),
            ("final training loss: mean KL over layers", meta.get("final_loss"), "nats", ".4f"),
            ("trained on", meta.get("data"), "", "text")]))
    _figures(run, section, FIGURES, "lens", "lens figure")


def _lens_file(run: RunFiles, path: Path, part: Section) -> None:
    data = run.json_object(path)
    if "logit_lens_kl" in data:
        _lens_eval(run, part, path, data)
    elif "cells" in data:
        _lens_show(run, part, path, data)
    else:
        raise ValueError("neither `nanolm lens --json` nor `nanolm lens eval --json` output")


def _lens_show(run: RunFiles, section: Section, path: Path, d: dict) -> None:
    for j, pos in enumerate(d["positions"]):
        rows = []
        for layer, cells in zip(d["layers"], d["cells"]):
            c = cells[j]
            rows.append([layer, c["top_tokens"][0], c["top_probs"][0], c["final_token_prob"], c["final_token_rank"],
                         c["kl_final"], c.get("entropy")])
        kind = "tuned lens" if d.get("tuned") else "logit lens" if d.get("final_norm", True) else "raw projection"
        section.tables.append(Table(f"{run.rel(path)}-{pos}", f"{kind} on {d['prompt']!r} at position {pos} "
                                    f"({d['tokens'][pos] if pos < len(d['tokens']) else ''!r}): the model predicts "
                                    f"{d['final_tokens'][j]!r} ({run.rel(path)})", [
            Column("layer"), Column("top-1 token"), Column("p(top-1)", "%", "pct"), Column("p(model's token)", "%", "pct"),
            Column("rank of model's token", fmt="int"), Column("KL(output ‖ layer)", "nats", ".3f"),
            Column("entropy", "nats", ".3f")], rows))


def _lens_eval(run: RunFiles, section: Section, path: Path, d: dict) -> None:
    layers, logit, tuned, ratios = d["layers"], d["logit_lens_kl"], d["tuned_lens_kl"], d.get("ratios")
    ratios = ratios if isinstance(ratios, list) and len(ratios) == len(layers) else [None] * len(layers)
    section.tables.append(Table(run.rel(path), f"KL(final ‖ lens) per layer on {d.get('tokens', '?')} held-out tokens "
                                f"({run.rel(path)})", [
        Column("layer"), Column("logit lens", "nats", ".4f"), Column("tuned lens", "nats", ".4f"),
        Column("tuned / logit", fmt=".2f")], [list(r) for r in zip(layers, logit, tuned, ratios)],
        note="the last layer is the output itself: both KLs are 0 there"))
    for layer, a, b in list(zip(layers, logit, tuned))[:-1]:
        section.measures += [Measure(f"logit-lens KL, layer {layer}", a, "nats", "lower", ".4f"),
                             Measure(f"tuned-lens KL, layer {layer}", b, "nats", "lower", ".4f")]


# ---- probes and interventions ----------------------------------------------------------------------

def _probe(run: RunFiles, path: Path) -> dict:
    return run.json_object(path, "feature", "layers")


def probe_section(run: RunFiles, section: Section) -> None:
    run.each_part(section, run.files(PROBES, "result"), lambda path, part: _probe_file(run, path, part))
    _figures(run, section, FIGURES, "probe", "probe accuracy per layer")


def _probe_file(run: RunFiles, path: Path, section: Section) -> None:
    d = _probe(run, path)
    feature = d["feature"]
    best = d.get("best_layer")
    section.tables.append(Table(run.rel(path), f"probe for {feature}: {d.get('n', '?')} examples, {d.get('position', '?')} "
                                f"token, control: random labels per {d.get('control', '?')} ({run.rel(path)})", [
        Column("layer"), Column("held-out accuracy", "%", "pct"), Column("95% CI", "%", "pct"),
        Column("majority rate", "%", "pct"), Column("control accuracy", "%", "pct"),
        Column("selectivity (acc − control)", "points", ".3f"), Column("train accuracy", "%", "pct"),
        Column("train / held-out", "examples", "text")],
        [[p["layer"], p["accuracy"], p["accuracy_ci"], p["majority"], p["control_accuracy"], p["selectivity"],
          p["train_accuracy"], f"{p['n_train']} / {p['n_test']}"] for p in d["layers"]],
        note=(f"best layer (most selective): {best}. " if best is not None else "")
        + "High held-out accuracy says the feature is readable, not that the model uses it: see Interventions."))
    section.measures += [Measure(f"probe {feature}: held-out accuracy, layer {p['layer']}", p["accuracy"], "%", "higher",
                                 "pct") for p in d["layers"]]
    section.lines += [f"{feature}: {w}" for w in d.get("warnings") or []]


def intervention_section(run: RunFiles, section: Section) -> None:
    run.each_part(section, run.files(PROBES, "result"), lambda path, part: _intervention(run, path, part))


def _intervention(run: RunFiles, path: Path, section: Section) -> None:
    d = _probe(run, path)
    iv = d.get("intervention")
    if not iv:
        return
    randoms = iv.get("random_deltas") or []
    beaten = sum(abs(x) < abs(iv["delta"]) for x in randoms)
    section.tables.append(field_table(run.rel(path), f"erasing {d['feature']} at layer {iv['layer']} ({run.rel(path)})", [
        ("method", iv["method"], "", "text"), ("directions removed", iv["rank"], "", "int"),
        ("measure", iv["measure"], "", "text"), ("texts scored", iv["scored"], "", "int"),
        ("without the edit", iv["base"], "nats", ".4f"), ("feature erased", iv["erased"], "nats", ".4f"),
        ("change", iv["delta"], "nats", ".4f"),
        ("random edits of the same size: mean change", _mean(randoms), "nats", ".4f"),
        ("random edits beaten", f"{beaten} of {len(randoms)}", "", "text"),
        ("p-value", iv.get("p_value"), "", ".3f"), ("effect-size floor", iv.get("min_effect"), "nats", ".3f"),
        ("mean edit size ‖Δx‖", iv.get("edit_norm"), "", ".3g"),
        ("target preferred, before", iv.get("preference_base"), "%", "pct"),
        ("target preferred, erased", iv.get("preference_erased"), "%", "pct"),
        ("fresh probe on erased activations", iv.get("probe_accuracy_after"), "%", "pct"),
        ("verdict", iv["verdict"], "", "text")]))
    section.lines.append(f"{d['feature']} at layer {iv['layer']}: {iv['verdict']}: {iv.get('reason', '')}")
    section.measures.append(Measure(f"erasing {d['feature']} at layer {iv['layer']}: change", iv["delta"], "nats",
                                    None, ".4f"))


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


# ---- SAEs ----------------------------------------------------------------------------------------

SAE_METRICS = [("l0", "L0: active latents per token", "latents", ".2f", "lower"),
               ("mse", "MSE", "activation units²", ".4g", "lower"),
               ("fvu", "FVU: variance unexplained (about the mean)", "%", "pct", "lower"),
               ("dead", "dead latents", "latents", "int", "lower"), ("dense", "dense latents (> 10% of tokens)", "latents",
                                                                   "int", None),
               ("ce_clean", "CE, clean", "nats", ".4f", None), ("ce_spliced", "CE, SAE spliced in", "nats", ".4f", "lower"),
               ("ce_recovered_zero", "CE loss recovered vs zero ablation", "%", "pct", "higher"),
               ("ce_recovered_mean", "CE loss recovered vs mean ablation", "%", "pct", "higher"),
               ("kl", "KL(clean ‖ spliced)", "nats/position", ".4f", "lower")]


def sae_section(run: RunFiles, section: Section) -> None:
    saes = list(run.each(section, run.files(SAE, "cfg"), lambda p: run.json_object(p, "d_in", "d_sae")))
    if saes:
        section.tables.append(Table("saes", "the run's SAEs", [
            Column("SAE"), Column("hook"), Column("architecture"), Column("D", fmt="int"), Column("M", fmt="int"),
            Column("K", fmt="int"), Column("λ (L1)", fmt=".3g"), Column("training steps", fmt="int"),
            Column("training tokens", "tokens", "int")],
            [[p.parent.name, c.get("hook_name"), c.get("architecture"), c["d_in"], c["d_sae"], c.get("k"),
              _own(c).get("l1"), _own(c).get("steps"), _own(c).get("tokens")] for p, c in saes]))
    run.each_part(section, run.files(SAE, "eval"), lambda path, part: _sae_eval(run, path, part))
    run.each_part(section, run.files(SAE, "sweep"), lambda path, part: _sae_sweep(run, path, part))
    _figures(run, section, SAE, "density", "latent firing densities")
    _figures(run, section, SAE, "sweep_plot", "the L0–FVU and L0–CE-recovered frontiers")


def _sae_eval(run: RunFiles, path: Path, section: Section) -> None:
    ev = run.json_object(path, "l0", "fvu")
    name = path.parent.name
    section.tables.append(field_table(f"eval-{name}", f"{name}: on {ev.get('tokens', '?')} held-out tokens "
                                      f"({run.rel(path)})",
                                      [(label, ev.get(k), unit, fmt) for k, label, unit, fmt, _ in SAE_METRICS]))
    section.measures += [Measure(f"SAE {name}: {label}", ev.get(k), unit, better, fmt)
                         for k, label, unit, fmt, better in SAE_METRICS if ev.get(k) is not None]


def _own(cfg: dict) -> dict:
    """nanolm's training record inside an SAE's cfg.json."""
    own = cfg.get("nanolm")
    return (own.get("extra") or {}) if isinstance(own, dict) else {}


def _sae_sweep(run: RunFiles, path: Path, section: Section) -> None:
    sw = run.json_object(path, "per_value", "knob")
    knob = "λ" if sw["knob"] == "l1" else "K"
    rows = [[v["value"], v["l0"]["median"], (v["l0"]["min"], v["l0"]["max"]), v["fvu"]["median"],
             (v["fvu"]["min"], v["fvu"]["max"]), v["ce_recovered_zero"]["median"],
             (v["ce_recovered_zero"]["min"], v["ce_recovered_zero"]["max"])] for v in sw["per_value"]]
    section.tables.append(Table(run.rel(path), f"frontier: {sw.get('arch', '?')} SAEs at {sw.get('hook', '?')}, "
                                f"{len(sw.get('seeds') or [])} seed(s) per {knob} ({run.rel(path)})", [
        Column(knob, fmt=".4g"), Column("L0, median", "latents", ".2f"), Column("L0, min–max", "latents", ".2f"),
        Column("FVU, median", "%", "pct"), Column("FVU, min–max", "%", "pct"),
        Column("CE recovered (zero abl.), median", "%", "pct"), Column("CE recovered, min–max", "%", "pct")], rows,
        note="neighbouring values differ beyond the seed spread only where their min–max ranges are disjoint"))


# ---- steering --------------------------------------------------------------------------------------

def steering_section(run: RunFiles, section: Section) -> None:
    run.each_part(section, run.files(STEERING, "sweep"), lambda path, part: _steering(run, path, part))
    _figures(run, section, FIGURES, "steer", "behaviour and fluency over α × layer")


def _steering(run: RunFiles, path: Path, section: Section) -> None:
    d = run.json_object(path, "cells", "unsteered", "direction")
    metric = "happy share" if d.get("metric") == "sentiment" else "p(matching)"
    cells = [d["unsteered"], *d["cells"]]
    section.tables.append(Table(run.rel(path), f"steering with {d['direction']} ({d.get('scale', '?')} scale), "
                                f"{len(d.get('seeds') or [])} seed(s) × {len(d.get('prompts') or [])} prompts "
                                f"({run.rel(path)})", [
        Column("layer"), Column("α", fmt=".3g"), Column("‖αv̂‖", fmt=".3g"), Column(metric, "%", "pct"),
        Column("change", "points", ".3f"), Column("KL(unsteered ‖ steered)", "nats", ".3f"),
        Column("perplexity", "", ".3g"), Column("distinct-2", "%", "pct"), Column("falls apart"),
        Column("example")],
        [[c["layer"], c["alpha"], c["added_norm"], c["behaviour"], c["change"], c["kl"], c["perplexity"],
          c["distinct2"], c["fallen_apart"], c.get("example", "")] for c in cells],
        note=f"fluency bound for the best cell: KL ≤ {d.get('max_kl', '?')} nats; the first row is unsteered"))
    best = d.get("best")
    section.lines.append(f"{d['direction']}: " + (f"best cell layer {best['layer']}, α {best['alpha']:g}: "
                                                  if best else "no best cell: ") + str(d.get("best_reason", "")))
    apart = d.get("falls_apart") or {}
    section.lines += [f"layer {layer}: the text falls apart from α = {a:g}" for layer, a in apart.items()
                      if a is not None]
    if best:
        section.measures.append(Measure(f"steering {d['direction']}: best change", best["change"], "points",
                                        "higher", ".3f"))
