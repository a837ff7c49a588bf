"""The ``nanolm`` command. Each command is a thin layer over a library function that returns
data; this module only parses arguments and formats results (rich tables, or JSON with --json).

Errors a user can fix (UserError) end as one line on stderr and exit code 2, without a traceback."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import click

from .errors import UserError


class _Group(click.Group):
    """Lists commands in the order they were added."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
def app() -> None:
    """nanolm: a small GPT and the toolkit to profile, reproduce and interpret it."""


def set_option(f):
    return click.option("--set", "set_", multiple=True, metavar="KEY=VALUE",
                        help="Config override (repeatable), e.g. --set lr=1e-3.")(f)


def json_option(f):
    return click.option("--json", "json_out", is_flag=True, help="Print the result as JSON on stdout.")(f)


def runs_dir_option(f):
    return click.option("--runs-dir", default="runs", show_default=True, help="Folder of run records.")(f)


def _console():
    from rich.console import Console

    return Console()


def _to_jsonable(obj: Any) -> Any:
    if is_dataclass(obj) and not isinstance(obj, type):
        return _to_jsonable(asdict(obj))
    if isinstance(obj, dict):
        return {k: _to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None  # JSON has no NaN or Infinity
    return obj


def _print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(_to_jsonable(obj), indent=2) + "\n")


# ---- train ------------------------------------------------------------------------------------

@app.command()
@click.option("--config", type=click.Path(path_type=Path), help="TOML file of config keys.")
@set_option
@click.option("--data", help="UTF-8 text file to train on (byte tokens); default: the embedded corpus.")
@click.option("--name", help="Run name (the folder is runs/<time>-<name>).")
@click.option("--seed", type=int, help="Random seed.")
@click.option("--deterministic", is_flag=True, help="Deterministic algorithms only (bitwise repeatable).")
@click.option("--resume", type=click.Path(path_type=Path), help="Continue the run in this folder from its latest checkpoint.")
@click.option("--stop-at", type=int, help="Checkpoint and stop after this step (the run stays resumable).")
@click.option("--tracker", type=click.Choice(["local", "mlflow", "wandb", "tensorboard"]),
              help="Also log to this tracker (the local run store is always written).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@json_option
def train(config: Path | None, set_: tuple[str, ...], data: str | None, name: str | None, seed: int | None,
          deterministic: bool, resume: Path | None, stop_at: int | None, tracker: str | None, quiet: bool,
          json_out: bool) -> None:
    """Train nanolm (or resume a run) and record it under runs/."""
    from .config import make_config
    from .train import train as run_training

    fields = {"data": data, "name": name, "seed": seed, "deterministic": True if deterministic else None,
              "tracker": tracker}
    if resume is None:
        cfg = make_config(config, list(set_), **fields)
    elif config or set_ or any(v is not None for v in fields.values()):
        cfg = _merge_resume_config(resume, config, set_, fields)
    else:
        cfg = None  # the run's own config
    result = run_training(cfg, resume=resume, stop_at=stop_at, progress=not quiet)
    if json_out:
        _print_json(result)
        return
    _print_train_result(result)


def _merge_resume_config(resume: Path, config: Path | None, set_: tuple[str, ...], fields: dict) -> Any:
    """The run's saved config with the user's changes on top (train() checks which may change)."""
    from .config import TrainConfig, load_toml, parse_overrides
    from .runs import read_manifest

    values = dict(read_manifest(resume)["config"])
    if config:
        values.update(load_toml(config))
    values.update({k: v for k, v in fields.items() if v is not None})
    values.update(parse_overrides(list(set_)))
    try:
        return TrainConfig(**values).validate()
    except (TypeError, ValueError) as e:  # the run's manifest was edited: unknown keys, wrong types
        raise UserError(f"--resume {resume}: its manifest's config is not valid ({e}); resume an intact run") from None


def _print_train_result(result: Any) -> None:
    from rich.table import Table

    table = Table(title=f"run {result.run_dir.name} ({result.status} at step {result.step})")
    table.add_column("measure")
    table.add_column("nats/token", justify="right")
    table.add_row("train loss", f"{result.train_loss:.4f}")
    table.add_row("val loss", f"{result.val_loss:.4f}")
    table.add_row("unigram entropy (no-context baseline)", f"{result.unigram_entropy:.4f}")
    console = _console()
    console.print(table)
    console.print(f"{result.tokens_per_s:,.0f} tokens/s over {result.seconds:.1f} s; run written to {result.run_dir}")


# ---- sample -----------------------------------------------------------------------------------

@app.command()
@click.argument("run")
@click.option("--prompt", "-p", multiple=True, help="Prompt text (repeatable).")
@click.option("--tokens", "-n", default=20, show_default=True, help="Tokens to generate per prompt.")
@click.option("--temperature", default=0.8, show_default=True, help="Sampling temperature; 0 is greedy.")
@click.option("--top-k", default=20, show_default=True, help="Sample among the k likeliest tokens.")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True, help="Sampling seed.")
@runs_dir_option
@json_option
def sample(run: str, prompt: tuple[str, ...], tokens: int, temperature: float, top_k: int, seed: int,
           runs_dir: str, json_out: bool) -> None:
    """Generate completions from a trained run."""
    from .runs import resolve_run
    from .sampling import complete

    if tokens <= 0:
        raise UserError(f"--tokens must be > 0, got {tokens}")
    if not 0 <= temperature < math.inf:
        raise UserError(f"--temperature must be a number >= 0 (0 is greedy), got {temperature}")
    if top_k <= 0:
        raise UserError(f"--top-k must be > 0, got {top_k}; e.g. --top-k 20")
    completions = complete(resolve_run(run, runs_dir), list(prompt) or [""], tokens, temperature, top_k, seed)
    if json_out:
        _warn_unknown_words(completions)  # on stderr, so the JSON on stdout stays clean
        _print_json(completions)
        return
    _print_completions(completions)


def _warn_unknown_words(completions: list) -> None:
    for c in completions:
        for word in c.unknown_words:
            click.echo(f"warning: {word!r} is not in the vocabulary; it was read as <unk>", err=True)


def _print_completions(completions: list) -> None:
    from rich.markup import escape

    console = _console()
    for c in completions:
        _warn_unknown_words([c])
        console.print(f"[bold]{escape(c.prompt)}[/bold]{escape(c.completion)}")


# ---- runs -------------------------------------------------------------------------------------

@app.group(invoke_without_command=True)
@runs_dir_option
@json_option
@click.pass_context
def runs(ctx: click.Context, runs_dir: str, json_out: bool) -> None:
    """List runs: name, status, steps, val loss, data version, commit."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.table import Table

    from .runs import list_runs

    found = list_runs(runs_dir)
    if json_out:
        _print_json(found)
        return
    if not found:
        _console().print(f"no runs in {runs_dir}/ yet; start one with: nanolm train")
        return
    table = Table(title=f"runs in {runs_dir}/")
    for col in ("run", "status", "step", "val loss", "data", "commit"):
        table.add_column(col, overflow="fold")
    for r in found:
        commit = "-" if r.commit is None else r.commit[:10] + ("+dirty" if r.dirty else "")
        table.add_row(r.path.name, r.status, f"{r.step if r.step is not None else '-'}/{r.steps}",
                      "-" if r.val_loss is None else f"{r.val_loss:.4f}", r.data_version or "-", commit)
    _console().print(table)


@runs.command("show")
@click.argument("run")
@runs_dir_option
def runs_show(run: str, runs_dir: str) -> None:
    """Print one run's manifest (JSON)."""
    from .runs import read_manifest, resolve_run

    _print_json(read_manifest(resolve_run(run, runs_dir)))


# ---- profile ----------------------------------------------------------------------------------

def window_options(f):
    f = click.option("--repeat", default=3, show_default=True, help="Measured windows (median and min–max over them).")(f)
    f = click.option("--active", default=3, show_default=True, help="Measured steps per window.")(f)
    f = click.option("--warmup", default=1, show_default=True, help="Profiler warm-up steps per window (not measured).")(f)
    return click.option("--wait", default=1, show_default=True, help="Steps skipped before each window.")(f)


@app.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@set_option
@window_options
@click.option("--trace", type=click.Path(path_type=Path), default="profile-trace.json", show_default=True,
              help="Chrome/Perfetto trace of the last window (gzipped when large).")
@click.option("--json", "json_path", type=click.Path(path_type=Path), help="Write the whole report as JSON here.")
@click.option("--measure-peak", is_flag=True, help="Measure the device's matmul peak instead of the datasheet value.")
@click.option("--with-stack", is_flag=True, help="Record Python stacks in the trace (more overhead).")
@click.option("--run-to-end", is_flag=True, help="Let a profiled script run to completion after the window.")
@click.option("--tokens-per-step", type=click.IntRange(min=1), help="Tokens per step of a profiled script, for 6N·tokens/s.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def profile(set_: tuple[str, ...], wait: int, warmup: int, active: int, repeat: int, trace: Path, json_path: Path | None,
            measure_peak: bool, with_stack: bool, run_to_end: bool, tokens_per_step: int | None,
            command: tuple[str, ...]) -> None:
    """Where a training step's time goes: phases, operators, syncs, a verdict and MFU.

    \b
    nanolm profile [--set key=value ...]          profile nanolm's own training steps
    nanolm profile -- python train.py ARGS        profile someone else's script, unchanged
    nanolm profile compare BEFORE.json AFTER.json --why "..."
    """
    if command and command[0] == "compare":
        return profile_compare.main(args=list(command[1:]), prog_name="nanolm profile compare", standalone_mode=False)
    from .profiling.profile import profile_script, profile_training
    from .profiling.render import print_report
    from .profiling.session import Window, check_trace_path

    window = Window(wait, warmup, active, repeat)
    from .io import check_writable_file

    check_trace_path(trace)
    if json_path is not None:
        check_writable_file(json_path, "--json", "report.json")
    if command:
        report = profile_script(list(command), window, trace, run_to_end, tokens_per_step, measure_peak, with_stack)
    else:
        report = profile_training(list(set_), window, trace, measure_peak, with_stack)
    print_report(report, _console())
    if json_path is not None:
        from .io import atomic_write_json

        atomic_write_json(json_path, report.to_dict())
        _console().print(f"report written to {json_path}")
    return None


@click.command()
@click.argument("before", type=click.Path(path_type=Path))
@click.argument("after", type=click.Path(path_type=Path))
@click.option("--why", help="What changed between the two runs.")
@json_option
def profile_compare(before: Path, after: Path, why: str | None, json_out: bool) -> None:
    """Before / after / why table of two profile reports (nanolm profile --json FILE)."""
    from .profiling.compare import compare_reports
    from .profiling.render import print_comparison

    comparison = compare_reports(before, after, why)
    if json_out:
        _print_json(comparison)
        return
    print_comparison(comparison, _console())


@app.command()
@click.option("--params", type=float, help="Parameters N (non-embedding), e.g. 1.24e8.")
@click.option("--preset", help="Take N from a nanolm preset instead (gpt2-124m, small, tiny).")
@click.option("--tokens-per-s", type=float, required=True, help="Training throughput, tokens/s.")
@click.option("--device", help="Device name for the datasheet peak (h100, a100, ...).")
@click.option("--peak-tflops", type=float, help="Or give the peak directly, TFLOP/s.")
@json_option
def mfu(params: float | None, preset: str | None, tokens_per_s: float, device: str | None, peak_tflops: float | None,
        json_out: bool) -> None:
    """MFU offline: 6·N·tokens/s over the device's peak."""
    from .model import GPT, preset_config
    from .profiling.mfu import Peak, compute_mfu, lookup_peak

    if (params is None) == (preset is None):
        raise UserError("give exactly one of --params N or --preset NAME")
    layers = d_model = seq = None
    if preset is not None:
        from .corpus import corpus_words
        from .model import PRESETS
        from .tokenizers import WordTokenizer

        try:  # the preset's own vocabulary, else the embedded corpus's (what it trains on by default)
            vocab = PRESETS[preset].get("vocab_size") if preset in PRESETS else None
            cfg = preset_config(preset, vocab_size=vocab or WordTokenizer(corpus_words()).vocab_size)
        except ValueError as e:
            raise UserError(str(e)) from None
        params = float(GPT(cfg).num_params(exclude_embeddings=True))
        layers, d_model, seq = cfg.n_layer, cfg.d_model, cfg.block_size
    if peak_tflops is not None:
        peak = Peak("given", peak_tflops * 1e12, "bf16", "given")
    elif device is not None:
        peak = lookup_peak(device)
    else:
        raise UserError("give --device NAME (e.g. h100) or --peak-tflops X")
    report = compute_mfu(params, tokens_per_s, peak, n_layer=layers, d_model=d_model, seq_len=seq)
    if json_out:
        _print_json(report)
        return
    _console().print(f"6 · {params:.3g} · {tokens_per_s:.3g} = {report.flops_per_s:.3g} FLOP/s over "
                     f"{peak.flops_per_s:.3g} ({peak.name}, {peak.source}) → MFU {report.mfu:.1%}"
                     + (f"; with attention 12·L·d·T: {report.mfu_with_attention:.1%}" if report.mfu_with_attention else ""))


@app.command()
@click.option("--device", default="auto", show_default=True, help="cpu, cuda or auto.")
@json_option
def peak(device: str, json_out: bool) -> None:
    """Measure this device's achievable matmul FLOP/s in each dtype it supports."""
    from .profiling.mfu import measure_peaks
    from .train import resolve_device

    peaks = measure_peaks(resolve_device(device).type)
    if json_out:
        _print_json(peaks)
        return
    from rich.table import Table

    table = Table(title=f"measured matmul peak on {device}")
    table.add_column("dtype")
    table.add_column("TFLOP/s", justify="right")
    for p in peaks:
        table.add_row(str(p.dtype).replace("torch.", ""), f"{p.flops_per_s / 1e12:.3f}")
    _console().print(table)


# ---- reproducibility ----------------------------------------------------------------------------

@app.group()
def repro() -> None:
    """Reproducibility checks."""


@repro.command("check")
@set_option
@click.option("--steps", default=20, show_default=True, help="Steps of each of the two runs.")
@click.option("--deterministic", is_flag=True, help="Deterministic algorithms only.")
@json_option
def repro_check_command(set_: tuple[str, ...], steps: int, deterministic: bool, json_out: bool) -> None:
    """Train twice with the same seed; compare losses and final weights bit for bit."""
    from .repro.check import repro_check

    if steps <= 0:
        raise UserError(f"--steps must be > 0, got {steps}")
    result = repro_check([*set_, *(["deterministic=true"] if deterministic else [])], steps, progress=True)
    if json_out:
        _print_json(result)
        return
    console = _console()
    if result.identical:
        console.print(f"identical: {result.steps} steps of losses and every final weight match bit for bit")
        return
    if result.first_divergent_step is not None:
        console.print(f"[bold]not reproducible[/bold]: the losses first differ at step {result.first_divergent_step} "
                      f"({result.loss_a!r} vs {result.loss_b!r})")
    if result.tensor is not None:
        console.print(f"final weights: {result.tensors_differing} tensors differ; the largest |Δ| is "
                      f"{result.max_abs_diff:.3g} in {result.tensor}")
    console.print("usual causes, most likely first:")
    for cause in result.causes:
        console.print(f"  • {cause}")


@app.command()
@set_option
@click.option("--n", "n", default=3, show_default=True, help="Number of seeds.")
@click.option("--name", required=True, help="Group name (runs are <name>-seed<S>).")
@click.option("--jobs", default=1, show_default=True, help="Runs at a time (local executor).")
@click.option("--executor", type=click.Choice(["local", "debug", "slurm"]), default="local", show_default=True)
@click.option("--runs-dir", help="Folder of run records (the same as --set runs_dir=...; default runs).")
@json_option
def seeds(set_: tuple[str, ...], n: int, name: str, jobs: int, executor: str, runs_dir: str | None,
          json_out: bool) -> None:
    """Run one config on N seeds as a group; print each metric's mean, std, min, max and spread.
    The seeds are S, S+1, ..., S+N-1, from --set seed=S (default 1337)."""
    from .repro.seeds import run_seeds

    if runs_dir is not None:
        set_ = (*set_, f"runs_dir={runs_dir}")

    def done(seed: int, run_dir: str | None) -> None:
        click.echo(f"seed {seed} finished: {run_dir}" if run_dir else f"seed {seed} diverged", err=True)

    result = run_seeds(list(set_), n, name, jobs, executor, on_done=done)
    for line in result.group.excluded:
        click.echo(f"warning: left out of the statistics: {line}", err=True)
    if json_out:
        _print_json(result)
        return
    from rich.table import Table

    g = result.group
    table = Table(title=f"group {g.name}: {len(g.runs)} seeds ({', '.join(map(str, g.seeds))}), {result.seconds:.1f} s")
    for col in ("metric", "mean", "std", "min", "max", "spread"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for m in g.metrics.values():
        table.add_row(m.metric, f"{m.mean:.4f}", "-" if m.std is None else f"{m.std:.4f}", f"{m.min:.4f}",
                      f"{m.max:.4f}", f"{m.spread:.4f}")
    console = _console()
    console.print(table)
    if result.plot:
        console.print(f"plot written to {result.plot}")


@app.command()
@click.argument("group_a")
@click.argument("group_b")
@click.option("--metric", default="val_loss", show_default=True, help="Final metric to compare.")
@click.option("--higher-is-better", is_flag=True, help="The metric improves upwards (accuracy).")
@click.option("--change", multiple=True, metavar="KEY", help="Config key(s) the comparison is about (repeatable).")
@runs_dir_option
@json_option
def compare(group_a: str, group_b: str, metric: str, higher_is_better: bool, change: tuple[str, ...], runs_dir: str,
            json_out: bool) -> None:
    """Noise-aware verdict: is GROUP_B better than GROUP_A beyond the seed noise?"""
    from .repro.compare import compare_run_groups

    result = compare_run_groups(group_a, group_b, metric, higher_is_better, list(change), runs_dir)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    if json_out:
        _print_json(result)
        return
    from rich.table import Table

    c = result.comparison
    table = Table(title=f"{metric}: {group_a} (A) vs {group_b} (B), {'higher' if higher_is_better else 'lower'} is better")
    for col in ("", "A", "B"):
        table.add_column(col, justify="right" if col else "left")
    table.add_row("seeds", str(c.n_a), str(c.n_b))
    table.add_row("mean", f"{c.mean_a:.4f}", f"{c.mean_b:.4f}")
    table.add_row("std", "-" if c.std_a is None else f"{c.std_a:.4f}", "-" if c.std_b is None else f"{c.std_b:.4f}")
    table.add_row("spread (max − min)", f"{c.spread_a:.4f}", f"{c.spread_b:.4f}")
    console = _console()
    console.print(table)
    console.print(f"B − A = {c.diff:+.4f}, 95% bootstrap CI [{c.ci_low:+.4f}, {c.ci_high:+.4f}]; "
                  f"P(B better than A) = {c.prob_improvement:.2f}; Welch p = "
                  + ("-" if c.welch_p is None else f"{c.welch_p:.3g}")
                  + f"; difference {'larger' if c.seed_spread_rule else 'not larger'} than the seed spread")
    console.print(f"[bold]verdict: {c.verdict}[/bold] ({c.reason})")


@app.group()
def experiment() -> None:
    """Kill criteria written in advance: run an experiment file, then KEEP or KILL."""


@experiment.command("run")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--jobs", default=1, show_default=True, help="Runs at a time.")
@json_option
def experiment_run(file: Path, jobs: int, json_out: bool) -> None:
    """Train the runs the experiment still lacks (finished runs are reused)."""
    from .repro.experiment import run_experiment

    if jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {jobs}")
    result = run_experiment(file, jobs, on_done=lambda g, s, status: click.echo(f"{g} seed {s} {status}", err=True))
    if json_out:
        _print_json(result)
        return
    diverged = f" ({len(result.diverged)} diverged)" if result.diverged else ""
    _console().print(f"{len(result.ran)} runs trained{diverged}, {len(result.reused)} reused; "
                     f"next: nanolm experiment verdict {file}")


@experiment.command("verdict")
@click.argument("file", type=click.Path(path_type=Path))
@json_option
def experiment_verdict_command(file: Path, json_out: bool) -> None:
    """KEEP or KILL, by the rule the file wrote down before the runs, with the evidence per scale."""
    from rich.table import Table

    from .repro.experiment import experiment_verdict

    v = experiment_verdict(file)
    for warning in v.warnings:
        click.echo(f"warning: {warning}", err=True)
    if json_out:
        _print_json(v)
        return
    table = Table(title=f"{v.idea}: rule \"{v.rule}\"")
    for col in ("scale", "baseline", "candidate", "candidate − baseline", "verdict"):
        table.add_column(col)
    for r in v.scales:
        table.add_row(r.scale, f"{r.mean_baseline:.4f}", "-" if r.mean_candidate is None else f"{r.mean_candidate:.4f}",
                      "-" if r.diff is None else f"{r.diff:+.4f}", r.verdict)
    console = _console()
    console.print(table)
    console.print(f"[bold]{v.decision}[/bold]: {v.reason}")


# ---- bisect -----------------------------------------------------------------------------------

@app.command("bisect")
@click.option("--good", required=True, help="A commit where the metric was fine (sha, tag or branch).")
@click.option("--bad", required=True, help="A later commit where it is broken.")
@click.option("--metric", default="val_loss", show_default=True,
              help="Final metric of each run: val_loss, train_loss, tokens_per_s or seconds.")
@click.option("--threshold", type=float, required=True, help="Good at or below it (at or above with --higher-is-better).")
@click.option("--higher-is-better", is_flag=True, help="Larger values are good, e.g. for tokens_per_s.")
@click.option("--noise", type=float, default=0.0, show_default=True,
              help="A value this close to the threshold skips the commit instead of judging it.")
@click.option("--timeout", "timeout_s", type=float, default=600, show_default=True,
              help="Seconds per training run; a slower commit is skipped.")
@set_option
@json_option
def bisect_cmd(good: str, bad: str, metric: str, threshold: float, higher_is_better: bool, noise: float,
               timeout_s: float, set_: tuple[str, ...], json_out: bool) -> None:
    """Find the first commit whose short training run breaks a metric (git bisect run).

    Each commit is trained in a temporary worktree with the --set overrides: good, bad, or skipped when
    it does not train or lands within --noise of the threshold. Your working tree, branch and index are
    left as they are, also on Ctrl-C.

    \b
    nanolm bisect --good v0.1 --bad HEAD --threshold 4.5 --set steps=200
    """
    from .repro.bisect import bisect_metric

    def show(step: Any) -> None:  # progress on stderr, so --json output stays clean
        click.echo(f"{step.commit[:12]}  {step.outcome:<4}  {step.reason}", err=True)

    result = bisect_metric(Path.cwd(), good, bad, metric, threshold, list(set_), higher_is_better=higher_is_better,
                           noise=noise, timeout_s=timeout_s, on_step=show)
    if json_out:
        _print_json(result)
    elif result.first_bad is not None:
        _console().print(f"first bad commit: {result.first_bad} {result.subject}", highlight=False)
    else:
        _console().print("skipped commits hide the first bad commit; it is one of:\n  " + "\n  ".join(result.candidates),
                         highlight=False)
    if result.first_bad is None:
        click.get_current_context().exit(1)


# ---- demo -------------------------------------------------------------------------------------

DEMO_PROMPTS = ["two plus two equals", "the girl was", "question : what is three plus four ?",
                "the dog walked to the park and then it"]


@app.command()
@set_option
@json_option
def demo(set_: tuple[str, ...], json_out: bool) -> None:
    """Train the tiny nanolm on the embedded corpus (CPU, a few minutes), then sample from it."""
    from .demo import run_demo

    result = run_demo(list(set_), DEMO_PROMPTS)
    if json_out:
        _print_json(result)
        return
    console = _console()
    console.rule("nanolm demo")
    _print_train_result(result.train)
    ratio = result.train.val_loss / result.train.unigram_entropy
    console.print(f"val loss is {ratio:.0%} of the unigram baseline: the model uses context.")
    console.rule("samples (temperature 0.8, top-k 20)")
    _print_completions(result.samples)
    if result.profile is not None:
        from .profiling.render import print_report

        console.rule("where a training step's time goes (nanolm profile)")
        print_report(result.profile, console)
    console.print(f"\nrun written to {result.train.run_dir}; list runs with: nanolm runs")


# ---- interpretability ---------------------------------------------------------------------------

from .interp.cli import lens, probe  # noqa: E402  (after the helpers they use)

app.add_command(lens)
app.add_command(probe)


from .formal.cli import dfa as _dfa_group, dyck as _dyck_group  # noqa: E402, I001

app.add_command(_dfa_group)
app.add_command(_dyck_group)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the command; a UserError becomes one line on stderr and its exit code."""
    try:
        code = app.main(args=argv, prog_name="nanolm", standalone_mode=False)
    except UserError as e:
        click.echo(f"nanolm: error: {e}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo("nanolm: aborted", err=True)
        sys.exit(130)
    except click.exceptions.NoArgsIsHelpError as e:  # a bare group: its help, as asked
        e.show()
        sys.exit(e.exit_code)
    except click.UsageError as e:  # a bad option or value: one line, with where to look
        where = f"{e.ctx.command_path} --help" if e.ctx is not None else "nanolm --help"
        click.echo(f"nanolm: error: {e.format_message()} (see {where})", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        click.echo("nanolm: interrupted", err=True)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
