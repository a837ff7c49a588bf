"""The run itself: its manifest, its loss curves, and the seed group it belongs to."""

from __future__ import annotations

from typing import Any

from ...errors import UserError
from ...runs import effective_status, read_metrics
from ..figures import svg_figure
from ..model import BY_ROW, Column, Figure, Measure, Section, Table, field_table
from ..registry import CONTENT_ERRORS, RunFiles, reason

# The final metrics a manifest records (RunFinal) and seed groups compare: name, unit, which way is better.
FINAL = {
    "val_loss": ("final val loss", "nats/token", "lower", ".4f"),
    "train_loss": ("final train loss", "nats/token", "lower", ".4f"),
    "tokens_per_s": ("throughput", "tokens/s", "higher", "int"),
    "seconds": ("training time", "s", "lower", ".2f"),
}
MAX_EVAL_ROWS = 30  # evaluations listed in the table (evenly spaced, the last always); all are in the figure
MAX_CURVE_POINTS = 1000  # logged steps drawn per curve


def _command(argv: list[str]) -> str:
    """The command line with the program as its name only (not the path of the machine's install)."""
    from pathlib import PurePath

    return " ".join([PurePath(argv[0]).name, *argv[1:]]) if argv else ""


def manifest_section(run: RunFiles, section: Section) -> None:
    m = run.manifest
    final = m.final
    steps = m.config.get("steps")
    step = final.step if final is not None else m.checkpoint_step
    rows: list[tuple[str, Any, str, str]] = [
        ("status", effective_status(m), "", "text"),
        ("step", step, "", "int"),
        ("steps planned", steps if isinstance(steps, int) else None, "", "int"),
        ("seed", m.seed, "", "text"),
        ("parameters", m.n_params, "", "int"),
        ("parameters without embeddings (N of 6N)", m.n_params_non_embedding, "", "int"),
        ("unigram entropy (no-context baseline)", m.unigram_entropy, "nats/token", ".4f"),
        ("resumed", len(m.resumes) if m.resumes else None, "times", "int"),
    ]
    if final is not None:
        rows[3:3] = [(FINAL[k][0], getattr(final, k), FINAL[k][1], FINAL[k][3]) for k in FINAL]
        rows.append(("diverged at step", final.diverged_at, "", "int"))
        section.measures += [
            Measure(FINAL[k][0], v, FINAL[k][1], FINAL[k][2], FINAL[k][3], group_metric=k)
            for k, v in final.metrics().items()
            if k in FINAL
        ]
    section.tables.append(field_table("summary", "the run", rows))


def provenance_section(run: RunFiles, section: Section) -> None:
    """What the run was made from, at the page's end and folded: the command, the commit, the data, the machine's
    software, the full config."""
    m = run.manifest
    section.folded = True
    section.lines.append(
        f"{m.name or run.run_dir.name}"
        + (f", created {m.created}" if m.created else "")
        + (f", by: {_command(m.command)}" if m.command else "")
    )
    git, data = m.git, m.data
    section.tables.append(
        field_table(
            "code-and-data",
            "code and data",
            [
                ("git commit", git.get("commit"), "", "text"),
                ("uncommitted changes", git.get("dirty"), "", "text"),
                ("sha256 of the uncommitted diff", git.get("diff_sha256"), "", "text"),
                ("data source", data.get("source"), "", "text"),
                ("data version", data.get("version"), "", "text"),
                ("data sha256", data.get("sha256"), "", "text"),
                ("tokenizer", data.get("tokenizer"), "", "text"),
                ("vocabulary", data.get("vocab_size"), "tokens", "int"),
                ("train tokens", data.get("train_tokens"), "tokens", "int"),
                ("val tokens", data.get("val_tokens"), "tokens", "int"),
            ],
            note="" if git.get("commit") else "no git commit recorded: the run was not started inside a git repository",
        )
    )
    env = m.environment
    section.tables.append(
        field_table(
            "environment",
            "environment",
            [
                ("python", env.get("python"), "", "text"),
                ("torch", env.get("torch"), "", "text"),
                ("numpy", env.get("numpy"), "", "text"),
                ("platform", env.get("platform"), "", "text"),
                ("device", env.get("device"), "", "text"),
                ("torch threads", env.get("torch_threads"), "", "int"),
            ],
        )
    )
    section.tables.append(
        Table(
            "config",
            "config (the full TrainConfig)",
            [Column("key"), Column("value")],
            [[k, _config_value(v)] for k, v in sorted(m.config.items())],
        )
    )


def _config_value(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool)) or v is None else repr(v)


# ---- loss curves ---------------------------------------------------------------------------------


def logged_and_evals(run: RunFiles) -> tuple[list[dict], list[dict]]:
    """metrics.jsonl's rows with a train loss (each logged step), and those with a val loss (each evaluation)."""
    rows = read_metrics(run.run_dir)
    return (
        [r for r in rows if isinstance(r.get("step"), int) and _number(r.get("train_loss"))],
        [r for r in rows if isinstance(r.get("step"), int) and _number(r.get("val_loss"))],
    )


def curves_figure(run: RunFiles, logged: list[dict], evals: list[dict]) -> Figure:
    """The loss curves, drawn at a size read without zooming (the page's first figure)."""
    return run.budget.take(
        svg_figure(
            _curves_figure(logged, evals, run.manifest.unigram_entropy),
            "curves-loss",
            "Loss curves: train loss at each logged step (one batch) and the train and val losses on the fixed eval batches, "
            "nats/token; the dotted line is the unigram entropy, what a model that reads no context reaches",
        )
    )


def curves_section(run: RunFiles, section: Section) -> None:
    """The evaluations on the fixed batches (the curves themselves are at the page's top: the results section)."""
    try:
        _, evals = logged_and_evals(run)
    except UserError as e:  # a line that is not JSON: read_metrics names it
        section.errors.append(str(e).replace(str(run.run_dir) + "/", ""))
        return
    if evals:
        shown = _evenly(evals, MAX_EVAL_ROWS)
        section.tables.append(
            Table(
                "evals",
                "evaluations on the fixed eval batches",
                [
                    Column("step", fmt="int"),
                    Column("tokens seen", "tokens", "int"),
                    Column("train loss", "nats/token", ".4f"),
                    Column("val loss", "nats/token", ".4f"),
                ],
                [[r["step"], r.get("tokens"), r.get("train_eval_loss"), r["val_loss"]] for r in shown],
                note=f"{len(shown)} of {len(evals)} evaluations shown (evenly spaced, the last included); all are in "
                "metrics.jsonl"
                if len(shown) < len(evals)
                else "",
            )
        )
        best = min(evals, key=lambda r: r["val_loss"])
        section.measures.append(Measure("lowest val loss", best["val_loss"], "nats/token", "lower", ".4f"))
        section.lines.append(
            f"lowest val loss {best['val_loss']:.4f} nats/token at step {best['step']:,}; "
            f"last {evals[-1]['val_loss']:.4f} at step {evals[-1]['step']:,}"
        )


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x


def _evenly(rows: list, n: int) -> list:
    """At most n of rows, evenly spaced, the last one always among them."""
    if len(rows) <= n:
        return rows
    picked = sorted({round(i * (len(rows) - 1) / (n - 1)) for i in range(n)})
    return [rows[i] for i in picked]


def _curves_figure(logged: list[dict], evals: list[dict], entropy: float | None) -> Any:
    from ...plots import pyplot

    fig, ax = pyplot().subplots(figsize=(8.2, 4.0))
    if logged:
        thin = _evenly(logged, MAX_CURVE_POINTS)
        ax.plot([r["step"] for r in thin], [r["train_loss"] for r in thin], lw=0.8, alpha=0.6, label="train (batch)")
    if evals:
        steps = [r["step"] for r in evals]
        ax.plot(steps, [r["val_loss"] for r in evals], "o-", ms=3, label="val (eval batches)")
        train_eval = [(r["step"], r["train_eval_loss"]) for r in evals if _number(r.get("train_eval_loss"))]
        if train_eval:
            ax.plot(*zip(*train_eval), "s--", ms=3, label="train (eval batches)")
    if entropy:
        ax.axhline(entropy, color="grey", lw=0.8, ls=":", label="unigram entropy")
    ax.set_xlabel("step")
    ax.set_ylabel("loss, nats/token")
    ax.legend()
    ax.grid(alpha=0.3)
    return fig


# ---- seed groups ---------------------------------------------------------------------------------


def seeds_section(run: RunFiles, section: Section) -> None:
    from ...io import to_jsonable
    from ...repro.seeds import group_figure, load_group

    name = run.manifest.config.get("group")
    if not isinstance(name, str) or not name:
        return
    try:
        group = load_group(name, run.run_dir.parent)
    except UserError as e:
        section.lines.append(f"group {name}: {e}")
        return
    here = run.run_dir.resolve()
    member = any(p.resolve() == here for p in group.runs)
    section.lines.append(
        f"this run is {'one' if member else 'not one (it has not finished)'} of the {len(group.runs)} "
        f"finished runs of seed group {name} (seeds {', '.join(map(str, group.seeds))}); their spread "
        "is the noise any difference from this config must beat"
    )
    own = run.manifest.final.metrics() if run.manifest.final is not None else {}
    section.tables.append(seed_noise_table(to_jsonable(group), own))
    section.tables.append(
        Table(
            "members",
            "the group's runs",
            [Column("seed"), Column("run"), Column("val loss", "nats/token", ".4f")],
            [
                [str(seed), p.name, group.metrics["val_loss"].values[i] if "val_loss" in group.metrics else None]
                for i, (seed, p) in enumerate(zip(group.seeds, group.runs))
            ],
        )
    )
    section.lines += [f"left out (did not finish): {line}" for line in group.excluded]
    section.lines += [f"the runs' configs differ: {line}" for line in group.mixed]
    try:  # the figure reads every member's metrics.jsonl
        fig = group_figure(group)
    except CONTENT_ERRORS as e:
        section.errors.append(f"the group's loss curves: {reason(e)}")
        return
    section.figures.append(
        run.budget.take(
            svg_figure(fig, "seeds-group", f"group {name}: final val loss per seed, and the train-loss curves' min–max band")
        )
    )


def seed_noise_table(group: dict, this_run: dict[str, float] | None = None) -> Table:
    """A seed group's final metrics over its seeds: mean, sample std, min, max and spread (the noise any difference
    from its config must beat), as the run's page and `nanolm seeds` show them. `group`: the group as JSON (the
    "group" of `nanolm seeds --json`); `this_run`: the page's run's own final metrics, shown beside them (the
    terminal, which has no one run, passes None and gets no such column)."""
    name, seeds = group.get("name", "?"), group.get("seeds", [])
    mine = [Column("this run", fmt=BY_ROW)] if this_run is not None else []
    rows, formats = [], []
    for key, s in group.get("metrics", {}).items():
        label, unit, _, fmt = FINAL.get(key, (key, "", None, ".4g"))
        own = [this_run.get(key)] if this_run is not None else []
        rows.append([label, unit, *own, s["mean"], s.get("std"), s["min"], s["max"], s["spread"]])
        formats.append(fmt)
    return Table(
        "noise",
        f"group {name}: {len(seeds)} seeds ({', '.join(map(str, seeds))}), their final metrics",
        [
            Column("metric"),
            Column("unit"),
            *mine,
            *(Column(c, fmt=BY_ROW) for c in ("mean", "std (sample)", "min", "max", "spread (max − min)")),
        ],
        rows,
        row_formats=formats,
    )
