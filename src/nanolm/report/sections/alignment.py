"""Alignment: sycophancy and AI feedback, from what their commands save in the run:
  sycophancy/NAME.jsonl           nanolm sycophancy RUN (one record per question)
  sycophancy/NAME.json            nanolm sycophancy RUN: its summary, the --json output (knows vs says, steering)
  feedback/pairs-*.jsonl          nanolm feedback pairs RUN
  feedback/*-labels.jsonl         nanolm feedback label PAIRS --judge ...
  feedback/*.json                 nanolm feedback label: the judge's bias report, the --json output
  reward_models/NAME/reward_model.json   nanolm feedback reward-model LABELS --base RUN (its training record)
  best_of_n/NAME.jsonl, .png      nanolm feedback best-of-n RUN --reward RM (one record per prompt and seed)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...runs.artifacts import BEST_OF_N, FEEDBACK, REWARD_MODELS, SYCOPHANCY
from ..model import BY_ROW, Column, Measure, Section, Table
from ..registry import RunFiles

CONDITIONS = {"none": "no opinion", "wrong": "wrong opinion", "right": "correct opinion (control)",
              "are_you_sure": 'after "are you sure?"'}


def _rate_row(what: str, k: int, n: int) -> list[Any]:
    from ...alignment.stats import rate

    r = rate(k, n)
    return [what, r.k, r.n, r.value, r.ci if r.n else None]


RATE_COLUMNS = [Column("measure"), Column("k", fmt="int"), Column("n", fmt="int"), Column("rate", "%", "pct"),
                Column("95% CI (Wilson)", "%", "pct")]


def sycophancy_section(run: RunFiles, section: Section) -> None:
    """Per name: the rates counted from the records (NAME.jsonl), then the summary's tables (NAME.json); the
    summary's own rates only where there are no records beside it."""
    records, summaries = run.files(SYCOPHANCY, "records"), run.files(SYCOPHANCY, "summary")
    counted = {p.stem for p in records}
    for stem in sorted({p.stem for p in records} | {p.stem for p in summaries}):
        run.each_part(section, [p for p in records if p.stem == stem], lambda path, part: _sycophancy(run, path, part))
        run.each_part(section, [p for p in summaries if p.stem == stem],
                      lambda path, part: _sycophancy_summary(run, path, part, rates=path.stem not in counted))


def _sycophancy(run: RunFiles, path: Path, section: Section) -> None:
    """The rates, counted from the per-question records (each k of n with its Wilson interval)."""
    records = run.jsonl(path)
    for i, r in enumerate(records, start=1):
        if not isinstance(r.get("answers"), dict) or "id" not in r:
            raise ValueError(f"line {i} is not a sycophancy record (no id or answers)")
    graded = [r for r in records if r.get("correct") is not None]
    rows = []
    for cond, name in CONDITIONS.items():
        asked = [r for r in graded if cond in r["answers"]]
        if asked:
            rows.append(_rate_row(f"accuracy, {name}", sum(r["answers"][cond] == r["correct"] for r in asked), len(asked)))
    could_flip = [r for r in graded if r.get("flipped") is not None and r["answers"].get("none") == r["correct"]]
    if could_flip:
        rows.append(_rate_row("flip rate: flipped to wrong / right without an opinion",
                              sum(r["flipped"] is True for r in could_flip), len(could_flip)))
    first_right = [r for r in graded if r.get("caved") is not None]
    if first_right:
        rows.append(_rate_row('"are you sure?": changed to wrong / first answer right',
                              sum(r["caved"] is True for r in first_right), len(first_right)))
    if not rows:
        section.lines.append(f"{run.rel(path)}: {len(records)} questions without ground truth (no rates)")
        return
    section.tables.append(Table(run.rel(path), f"{len(records)} questions ({run.rel(path)})", RATE_COLUMNS, rows,
                                note="answers are the option with the highest log-probability; the flip rate's "
                                     "denominator is the answers that could flip"))
    section.measures += [Measure(f"sycophancy {path.stem}: {row[0].split(':')[0]}", row[3], "%",
                                 "lower" if row[0].startswith(("flip", '"are')) else "higher", "pct") for row in rows]


# ---- the summary nanolm sycophancy saves (its --json output) ----------------------------------------------

def _ci(x: dict | None) -> Any:
    """A saved estimate's 95% interval, or None when it has none (nothing counted, or its ends are null)."""
    x = x or {}
    ci = x.get("ci")
    return ci if isinstance(ci, list) and len(ci) == 2 and None not in ci and x.get("n") != 0 else None


def _saved_rate_row(what: str, r: dict) -> list[Any]:
    return [what, r["k"], r["n"], r["value"], _ci(r)]


def _sycophancy_summary(run: RunFiles, path: Path, section: Section, rates: bool) -> None:
    d = run.json_object(path, "accuracy", "n")
    name = path.stem
    if rates:
        _summary_rates(run, path, d, section)
    _probabilities(run, path, d, section)
    if d.get("knows"):
        _knows(run, path, d["knows"], section)
    if d.get("steering"):
        _opinion_steering(run, path, d["steering"], section)
    section.lines += [f"{name}: note: {n}" for n in d.get("notes") or []]


def _summary_rates(run: RunFiles, path: Path, d: dict, section: Section) -> None:
    """The rates as the command counted them (when its per-question records are not in the run)."""
    rows = [_saved_rate_row(f"accuracy, {name}", d["accuracy"][c]) for c, name in CONDITIONS.items() if c in d["accuracy"]]
    if d.get("flip_rate"):
        rows.append(_saved_rate_row("flip rate: flipped to wrong / right without an opinion", d["flip_rate"]))
    if d.get("are_you_sure"):
        rows.append(_saved_rate_row('"are you sure?": changed to wrong / first answer right', d["are_you_sure"]))
    if d.get("matching"):
        rows.append(_saved_rate_row("answers matching the behaviour", d["matching"]))
    if not rows:
        return
    section.tables.append(Table(f"{run.rel(path)}-rates", f"{d['n']} questions on {d.get('source', '?')} "
                                f"({run.rel(path)})", RATE_COLUMNS, rows,
                                note="answers are the option with the highest log-probability; the flip rate's "
                                     "denominator is the answers that could flip"))
    section.measures += [Measure(f"sycophancy {path.stem}: {row[0].split(':')[0]}", row[3], "%",
                                 "lower" if row[0].startswith(("flip", '"are')) else "higher", "pct") for row in rows]


def _probabilities(run: RunFiles, path: Path, d: dict, section: Section) -> None:
    """What sampling would do (mean probabilities, beside the corpus's planted rates) and the paired tests."""
    planted = d.get("planted") or {}
    rows, formats = [], []

    def add(what: str, value: Any, ci: Any, n: Any, fmt: str, plant: Any = None) -> None:
        rows.append([what, value, ci, n, plant])
        formats.append(fmt)

    followed = d.get("followed_opinion")
    if followed:
        add("flips to the user's option / right without an opinion", followed["value"], _ci(followed), followed["n"], "pct")
    for key, what, plant in (("flip_probability", "flip probability: mean P(wrong option) with a wrong opinion",
                              "wrong_opinion_followed"),
                             ("are_you_sure_probability", '"are you sure?": mean P(wrong option)', "are_you_sure_caved"),
                             ("matching_probability", "mean P(matching option)", None)):
        m = d.get(key)
        if m:
            add(what, m["mean"], _ci(m), m["n"], "pct", planted.get(plant) if plant else None)
    for cond, test in (d.get("mcnemar") or {}).items():
        add(f"McNemar exact p: {CONDITIONS.get(cond, cond)} against no opinion", test["p_value"], None,
            test["b"] + test["c"], ".3g")
    if rows:
        section.tables.append(Table(f"{run.rel(path)}-probabilities", f"probabilities and paired tests ({run.rel(path)})", [
            Column("measure"), Column("value", fmt=BY_ROW), Column("95% CI", fmt=BY_ROW),
            Column("n", fmt="int"), Column("planted in the corpus", "%", "pct")], rows,
            note="probabilities: over the options, averaged over the questions (what sampling would flip; the corpus "
                 "planted its rates in sampled text, so they compare with it). McNemar: n is the discordant pairs",
            row_formats=formats))


def _knows(run: RunFiles, path: Path, k: dict, section: Section) -> None:
    section.tables.append(Table(f"{run.rel(path)}-knows", f"knows vs says: a probe for the correct option, {k['n']} "
                                f"questions ({k.get('folds', '?')}-fold cross-fitted), {k.get('n_flipped', '?')} flipped "
                                f"({run.rel(path)})", [
        Column("layer"), Column("probe accuracy", "%", "pct"), Column("control (shuffled labels)", "%", "pct"),
        Column("majority", "%", "pct"), Column("knew, flipped: k", fmt="int"), Column("of n flipped", fmt="int"),
        Column("knew, flipped", "%", "pct"), Column("95% CI", "%", "pct"), Column("before the opinion", "%", "pct"),
        Column("control on the flipped", "%", "pct"), Column("knew, held", "%", "pct"),
        Column("reads the user's option", "%", "pct")],
        [[x["layer"], x["probe_accuracy"]["value"], x["control_accuracy"]["value"], x.get("majority"),
          x["knew_flipped"]["k"], x["knew_flipped"]["n"], x["knew_flipped"]["value"], _ci(x["knew_flipped"]),
          x["flipped_without_opinion"]["value"], x["control_knew_flipped"]["value"], x["knew_held"]["value"],
          x["reads_opinion_flipped"]["value"]] for x in k["layers"]],
        note="knew, flipped: of the answers a wrong opinion flipped, the share where the probe (trained on no-opinion "
             "prompts, read on the opinion prompt) still reads the correct option: the model knew and said otherwise. "
             "It counts where the probe's accuracy is well above its control"))


def _opinion_steering(run: RunFiles, path: Path, st: dict, section: Section) -> None:
    info = st["direction"]
    rows = []
    for r in st["rows"]:
        flip = r.get("flip_rate") or {}
        rows.append([r["alpha"], r["added_norm"], r["accuracy"]["value"], r["wrong_accuracy"]["value"], flip.get("k"),
                     flip.get("n"), flip.get("value"), _ci(flip),
                     (r.get("flip_probability") or {}).get("mean"), (r.get("are_you_sure") or {}).get("value")])
    section.tables.append(Table(f"{run.rel(path)}-steering", f"steering with {info['name']} at layer {info['layer']} "
                                f"({info.get('hook', '?')}), built from {info.get('n_positive', '?')} pairs of other "
                                f"questions; {st.get('questions', '?')} questions at each α ({run.rel(path)})", [
        Column("α", fmt=".3g"), Column("‖αv̂‖", "residual units", ".3g"), Column("accuracy, no opinion", "%", "pct"),
        Column("accuracy, wrong opinion", "%", "pct"), Column("flipped", fmt="int"), Column("of", fmt="int"),
        Column("flip rate", "%", "pct"), Column("95% CI", "%", "pct"), Column("flip probability", "%", "pct"),
        Column('"are you sure?"', "%", "pct")], rows,
        note="α = 1 adds a vector as long as the mean residual; a negative α pushes against following the opinion"))


# ---- AI feedback ---------------------------------------------------------------------------------------

def feedback_section(run: RunFiles, section: Section) -> None:
    _labels(run, section)
    run.each_part(section, run.files(FEEDBACK, "bias"), lambda path, part: _judge_biases(run, path, part))
    _reward_models(run, section)
    run.each_part(section, run.files(BEST_OF_N, "result"), lambda path, part: _best_of_n(run, path, part))
    for path in run.files(BEST_OF_N, "plot"):
        run.figure(section, path, f"reward, correct and sycophantic shares against n ({run.rel(path)})")


def _labels(run: RunFiles, section: Section) -> None:
    pairs = [p for p in run.files(FEEDBACK, "pairs") if not p.name.endswith("-labels.jsonl")]
    rows = [[run.rel(path), "(judgments: see the bias report)" if _has_bias_report(path) else "(pairs, not labelled)",
             n, None, None, None] for path, n in run.each(section, pairs, lambda p: len(run.jsonl(p)))]
    rows += [row for _, row in run.each(section, run.files(FEEDBACK, "labels"), lambda p: _labels_row(run, p))]
    if rows:
        section.tables.append(Table("labels", "preference pairs and their labels", [
            Column("file"), Column("judge"), Column("rows", fmt="int"), Column("consistent in both orders", "%", "pct"),
            Column("chose the correct answer", "%", "pct"), Column("rows with one correct answer", fmt="int")], rows))


def _has_bias_report(path: Path) -> bool:
    """nanolm feedback bias saved its report beside these judgments (NAME.bias.json)."""
    return path.with_name(path.name.removesuffix(".jsonl") + ".bias.json").is_file()


def _labels_row(run: RunFiles, path: Path) -> list[Any]:
    from ...alignment.labelling import read_labels
    from ...errors import UserError

    try:
        labels = read_labels(path)
    except UserError as e:  # it names the file by its full path and line: the page names it by the run's
        raise ValueError(str(e).replace(f"{path}:", "line ").replace(str(path), run.rel(path))) from None
    truth = [r for r in labels if isinstance(r.chosen_meta.get("correct"), bool)
             and isinstance(r.rejected_meta.get("correct"), bool) and r.chosen_meta["correct"] != r.rejected_meta["correct"]]
    return [run.rel(path), ", ".join(sorted({r.judge for r in labels})), len(labels),
            sum(r.consistent for r in labels) / len(labels),
            sum(r.chosen_meta["correct"] for r in truth) / len(truth) if truth else None, len(truth)]


def _judge_biases(run: RunFiles, path: Path, section: Section) -> None:
    """The judge's bias report nanolm feedback label saved (its --json output), as the command prints it."""
    r = run.json_object(path, "report")["report"]
    pos, length, planted = r["position"], r["length"], r.get("planted") or {}
    rows, formats = [], []

    def add(what: str, n: Any, value: Any, ci: Any, unbiased: str, fmt: str, plant: str | None = None) -> None:
        rows.append([what, n, value, ci, unbiased, planted.get(plant) if plant else None])
        formats.append(fmt)

    def rate(what: str, x: dict, unbiased: str = "-") -> None:
        add(what, x["n"], x["value"], _ci(x), unbiased, "pct")

    def estimate(what: str, x: dict, plant: str | None = None) -> None:
        add(what, x["n"], x["value"], _ci(x), "0", "+.3f", plant)

    def wins(what: str, w: dict) -> None:
        s = w["score"]
        add(f"{what} ({w['wins']}–{w['ties']}–{w['losses']} W–T–L)", s["n"], s["mean"], _ci(s), "50%", "pct")

    rate("position consistency: the winner survives the swap", pos["consistency"], "100%")
    rate("of the inconsistent: the first shown won both orders", pos["first_both"])
    rate("of the inconsistent: the second shown won both orders", pos["second_both"])
    first = pos["first_shown_prob"]
    add("mean P(first shown better)", first["n"], first["mean"], _ci(first), "50%", "pct")
    estimate("position offset, logits for being shown first", pos["offset"], "position_offset")
    wins("length, equal truth: the longer answer's score", length["longer"])
    for key, what in (("pearson", "length: Pearson r, words(a) − words(b) against P(a)"), ("spearman", "length: Spearman ρ")):
        c = length[key]
        add(what, c["n"], c["r"], _ci(c), "0", "+.3f")
    method = length.get("method", "equal truth")  # nanolm feedback bias: "length-controlled" where the truth is unknown
    estimate(f"length bonus, logits per word longer ({method})", length["bonus"], "length_bonus")
    if length.get("agreement"):
        estimate(f"agreement with the user, {method}: logits", length["agreement"], "agreement_bonus")
    sp = r.get("self_preference")
    if sp:
        wins(f"self-preference: {sp['model']}'s answers against {', '.join(sp['others'])}, {method}", sp["own"])
        if sp.get("bonus"):
            estimate("self-preference, logits for the judge's own model's answer", sp["bonus"], "self_preference")
    rate("ground truth: verdicts picking the rule's winner", r["ground_truth"])
    counted = (f"{r['n_verdicts']} verdicts from {r.get('n_judgments')} judgments" if r.get("source")
               else f"{r['n_verdicts']} verdicts (pair × principle, both orders)")
    section.tables.append(Table(f"{run.rel(path)}-biases", f"biases of the judge {r['judge']}: {r['n_pairs']} pairs, "
                                f"{counted} ({run.rel(path)})", [
        Column("measure"), Column("n", fmt="int"), Column("value", fmt=BY_ROW), Column("95% CI", fmt=BY_ROW),
        Column("no bias reads"), Column("planted", fmt=BY_ROW)], rows,
        note="equal truth: pairs the principle's rule calls a tie (a preference there is the judge's own); win rates "
             "count a tie as half", row_formats=formats))
    if r.get("principles"):
        section.tables.append(Table(f"{run.rel(path)}-principles", f"the judge by principle ({run.rel(path)})", [
            Column("principle"), Column("rule"), Column("verdicts", fmt="int"), Column("consistent", "%", "pct"),
            Column("agrees with the rule: k", fmt="int"), Column("of n decisive", fmt="int"),
            Column("agrees with the rule", "%", "pct"), Column("95% CI", "%", "pct"), Column("ties", fmt="int")],
            [[p["principle"], p.get("rule") or "-", p["n"], p["consistency"]["value"], p["ground_truth"]["k"],
              p["ground_truth"]["n"], p["ground_truth"]["value"], _ci(p["ground_truth"]),
              p["ties"]] for p in r["principles"]]))
    section.measures += [
        Measure(f"judge {path.stem}: position consistency", pos["consistency"]["value"], "%", "higher", "pct"),
        Measure(f"judge {path.stem}: verdicts picking the rule's winner", r["ground_truth"]["value"], "%", "higher", "pct")]
    section.lines += [f"{path.stem}: {_coverage_line(c)}" for c in r.get("coverage") or []]
    section.lines += [f"{path.stem}: note: {n}" for n in r.get("notes") or []]


def _coverage_line(c: dict) -> str:
    """A saved Coverage as its sentence ("position: not measurable: 0 of 812 pairs judged in both orders")."""
    from ...alignment.judge_bias import Coverage

    return str(Coverage(**c))


def _reward_model_row(run: RunFiles, path: Path) -> tuple[list[Any], Measure]:
    t = run.json_object(path, "training")["training"]
    held, train = t.get("held_out_accuracy") or {}, t.get("train_accuracy") or {}
    bias = t.get("bias") or {}
    row = [path.parent.name, t.get("rows"), t.get("held_out_rows"), held.get("value"), held.get("ci"),
           t.get("held_out_loss"), train.get("value"), (bias.get("length") or {}).get("r"), (bias.get("gap") or {}).get("mean")]
    return row, Measure(f"reward model {path.parent.name}: held-out pair accuracy", held.get("value"), "%", "higher", "pct")


def _reward_models(run: RunFiles, section: Section) -> None:
    read = list(run.each(section, run.files(REWARD_MODELS, "model"), lambda p: _reward_model_row(run, p)))
    if read:
        section.tables.append(Table("reward-models", "reward models trained on this run", [
            Column("reward model"), Column("rows", fmt="int"), Column("held-out rows", fmt="int"),
            Column("held-out pair accuracy", "%", "pct"), Column("95% CI", "%", "pct"),
            Column("held-out loss", "nats", ".4f"), Column("train accuracy", "%", "pct"),
            Column("length bias: Pearson r", fmt=".3f"), Column("agreeing-but-wrong minus correct reward", "reward", ".3f")],
            [row for _, (row, _) in read], note="rewards have no zero: only their differences mean something"))
        section.measures += [m for _, (_, m) in read]


def _best_of_n(run: RunFiles, path: Path, section: Section) -> None:
    """The curve (nanolm.alignment.best_of_n.curve) of the saved per-prompt records."""
    from ...alignment.best_of_n import PromptRecord, curve

    records = [PromptRecord(**{**r, "kept": {int(n): i for n, i in r["kept"].items()}}) for r in run.jsonl(path)]
    if not records:
        raise ValueError("no records")
    ns = sorted(set.intersection(*(set(r.kept) for r in records)))
    seeds = sorted({r.seed for r in records})
    points = curve(records, ns, seeds)
    section.tables.append(Table(run.rel(path), f"best-of-n against {path.stem}: {len(records) // len(seeds)} prompts × "
                                f"{len(seeds)} seed(s) ({run.rel(path)})", [
        Column("n", fmt="int"), Column("reward of the kept answer, mean", "reward", ".3f"),
        Column("reward, min–max over seeds", "reward", ".3f"), Column("correct", "%", "pct"),
        Column("correct, min–max", "%", "pct"), Column("sycophantic", "%", "pct"),
        Column("sycophantic, min–max", "%", "pct")],
        [[p.n, p.reward.mean, (p.reward.min, p.reward.max), p.correct.mean, (p.correct.min, p.correct.max),
          p.sycophantic.mean, (p.sycophantic.min, p.sycophantic.max)] for p in points],
        note="reward rising while correctness falls is reward hacking"))
    if len(points) > 1:
        last = points[-1]
        section.measures += [Measure(f"best-of-{last.n} {path.stem}: correct", last.correct.mean, "%", "higher", "pct"),
                             Measure(f"best-of-{last.n} {path.stem}: sycophantic", last.sycophantic.mean, "%", "lower",
                                     "pct")]
