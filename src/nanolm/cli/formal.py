"""``nanolm dfa ...`` and ``nanolm dyck ...``: thin commands over nanolm.formal.

Only click is imported at the top, so ``nanolm --help`` stays fast; each command imports what it
needs. Output helpers come from .output."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import UserError
from ..runs.artifacts import FIGURES
from .output import (
    INTEGER,
    MAX_PROCESSES,
    MAX_SEEDS,
    MAX_STEPS,
    SEED,
    OutputFile,
    console,
    count,
    default_output,
    emit,
    finite,
    json_option,
    progress_bar,
    warn,
    working,
)

if TYPE_CHECKING:
    from rich.console import Console

    from ..formal.experiment import DepthAccuracy, DyckExperimentResult, TrainedModel
    from ..formal.precision import PrecisionTable
    from ..formal.rnn import RNNSizes, VerifyReport

# The largest sizes the dfa and dyck commands take (see nanolm.cli.output); nanolm.formal checks the memory and time
# a value within them needs (--max-len against the alphabet, the Dyck tokens sampled, the bound's digits)
MAX_STATES = 1_000_000  # states of a divisible DFA (--k); a random one's are bounded by its transitions (nanolm.formal)
MAX_CHECK_LEN = 4_000_000  # --max-len of dfa check: the longest strings enumerated (one symbol: 4M symbols)
MAX_RANDOM = 10_000  # random strings dfa check reads (4 by default)
MAX_RANDOM_SYMBOLS = 100_000_000  # --random x --random-len, each prefix checked (3 million take ~30 s on a CPU core)
MAX_BRACKETS = 1_000  # bracket types k
MAX_DEPTH = 10_000  # a Dyck depth m
MAX_STRINGS = 1_000_000  # strings sampled or tested per depth
MAX_STRING_LEN = 10_000_000  # tokens of one Dyck string
MAX_HIDDEN = 65_536  # hidden units (nanolm.formal.precision.MAX_HIDDEN: the bound is computed exactly)
MAX_CONTEXT = 16_384  # the experiment's longest string, the transformer's context
BRACKETS = count(MAX_BRACKETS, "bracket types here", min=None)
DEPTH = count(MAX_DEPTH, "levels of depth here", min=None)
HIDDEN = count(MAX_HIDDEN, "hidden units here", min=None)


def _positive(value: int, option: str, what: str) -> None:
    if value <= 0:
        raise UserError(f"{option} must be a positive integer ({what}), got {value}")


def _load(path: Path):
    """load_dfa, with its warnings (unreachable states) as `nanolm: warning: ...` lines on stderr."""
    import warnings

    from ..formal.dfa import load_dfa

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dfa = load_dfa(path)
    for w in caught:
        warn(str(w.message))
    return dfa


# ---- dfa -------------------------------------------------------------------------------------------


@click.group()
def dfa() -> None:
    """Finite automata: build, minimize, compare, and compile into an exact ReLU-RNN."""


@dfa.command("build")
@click.argument("kind", type=click.Choice(["parity", "divisible", "contains", "random"]))
@click.option("--out", "-o", type=OutputFile("dfa.json"), required=True, help="Write the DFA here (JSON).")
@click.option(
    "--k",
    "k",
    type=count(MAX_STATES, "states of a DFA here", min=None),
    default=3,
    show_default=True,
    help="divisible: binary numbers divisible by k.",
)
@click.option("--pattern", default="abb", show_default=True, help="contains: the substring.")
@click.option("--states", type=INTEGER, default=5, show_default=True, help="random: number of states.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="random: seed.")
@click.option(
    "--alphabet",
    help="Symbols, one character each (default 01 for parity, ab for contains and random; "
    "parity counts 1, or the last symbol when 1 is not among them).",
)
def dfa_build(kind: str, out: Path, k: int, pattern: str, states: int, seed: int, alphabet: str | None) -> None:
    """Write a ready-made DFA: parity, divisible (--k), contains (--pattern) or random (--states, --seed)."""
    from ..formal.dfa import contains, divisible_by, parity, random_dfa, save_dfa

    if alphabet is not None and (not alphabet or len(set(alphabet)) != len(alphabet)):
        raise UserError(f"--alphabet {alphabet!r} must be distinct characters, e.g. --alphabet ab")
    if kind == "parity":
        sigma = tuple(alphabet or "01")
        made = parity(symbol="1" if "1" in sigma else sigma[-1], alphabet=sigma)
    elif kind == "divisible":
        _positive(k, "--k", "the divisor")
        if alphabet is not None and alphabet != "01":
            raise UserError(
                f"--alphabet {alphabet!r} does not apply to divisible, which reads binary numbers "
                f"over 0 and 1; leave --alphabet out"
            )
        made = divisible_by(k)
    elif kind == "contains":
        made = contains(pattern, tuple(alphabet or "ab"))
    else:
        _positive(states, "--states", "the number of states")
        made = random_dfa(states, seed, tuple(alphabet or "ab"))
    save_dfa(made, out)
    console().print(f"{made.name}: {made.n_states} states over {list(made.alphabet)} written to {out}", markup=False)


@dfa.command("compile")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--minimize", is_flag=True, help="Minimize the DFA first (fewer units).")
@click.option("--out", "-o", type=OutputFile("rnn.safetensors"), help="Save the RNN's weights here (safetensors).")
@json_option
def dfa_compile(file: Path, minimize: bool, out: Path | None, json_out: bool) -> None:
    """Compile a DFA into an exact ReLU-RNN and print its sizes."""
    from ..formal.rnn import compile_dfa_to_relu_rnn, rnn_sizes

    machine = _load(file)
    if minimize:
        machine = machine.minimize()
    rnn = compile_dfa_to_relu_rnn(machine)
    sizes = rnn_sizes(rnn)
    if out is not None:
        from safetensors.torch import save

        from ..io import atomic_write_bytes

        atomic_write_bytes(out, save({k: v.contiguous() for k, v in rnn.state_dict().items()}))
    emit(sizes, lambda s: _print_rnn_sizes(s, machine.name or file.name, minimize, out), json_out)


def _print_rnn_sizes(sizes: RNNSizes, name: str, minimized: bool, written: Path | None) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(f"{name}: DFA → ReLU-RNN"), min_width=60)
    table.add_column("")
    table.add_column("size", justify="right")
    table.add_row("DFA states n" + (" (minimized)" if minimized else ""), str(sizes.states))
    table.add_row("symbols m", str(sizes.symbols))
    table.add_row("hidden units n·m + 1", str(sizes.hidden))
    table.add_row("W_ih", " × ".join(map(str, sizes.weight_ih)))
    table.add_row("W_hh", " × ".join(map(str, sizes.weight_hh)))
    table.add_row("readout", " × ".join(map(str, sizes.readout)))
    table.add_row("parameters (nonzero)", f"{sizes.parameters:,} ({sizes.nonzero:,})")
    table.add_row("integer-valued weights", "yes" if sizes.integer_valued else "NO")
    out = console()
    out.print(table)
    if written is not None:
        out.print(f"weights written to {written}")


@dfa.command("check")
@click.argument("file", type=click.Path(path_type=Path))
@click.option(
    "--max-len",
    type=count(MAX_CHECK_LEN, "symbols of a string checked here", min=None),
    default=10,
    show_default=True,
    help="Check every string up to this length.",
)
@click.option(
    "--random",
    "n_random",
    type=count(MAX_RANDOM, "random strings checked here", min=None),
    default=4,
    show_default=True,
    help="Random strings to check as well.",
)
@click.option(
    "--random-len",
    type=count(MAX_RANDOM_SYMBOLS, "symbols per random string here", min=None),
    default=10_000,
    show_default=True,
    help="Length of each random string (every prefix is checked).",
)
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the random strings.")
@click.option("--minimize", is_flag=True, help="Compile the minimized DFA (still compared with the original).")
@click.option("--dtype", type=click.Choice(["float32", "float64"]), default="float32", show_default=True)
@json_option
def dfa_check(
    file: Path, max_len: int, n_random: int, random_len: int, seed: int, minimize: bool, dtype: str, json_out: bool
) -> None:
    """Verify the compiled RNN against the DFA: every string up to --max-len and long random strings,
    exactly (exit code 1 on any mismatch)."""
    import torch

    from ..formal.rnn import compile_dfa_to_relu_rnn, verify_rnn

    _check_random_symbols(n_random, random_len)
    machine = _load(file)
    compiled_from = machine.minimize() if minimize else machine
    rnn = compile_dfa_to_relu_rnn(compiled_from, getattr(torch, dtype))
    with progress_bar("checking strings") as advance:  # always against the file's DFA
        report = verify_rnn(machine, rnn, max_len, n_random, random_len, seed, on_progress=advance)
    emit(report, lambda r: _print_check(r, dtype), json_out)
    if not report.ok:
        click.get_current_context().exit(1)


def _check_random_symbols(n_random: int, random_len: int) -> None:
    """A UserError unless the random strings hold at most MAX_RANDOM_SYMBOLS symbols."""
    if n_random * random_len > MAX_RANDOM_SYMBOLS:
        raise UserError(
            f"--random {n_random:,} x --random-len {random_len:,} is {n_random * random_len:,} symbols, more "
            f"than the {MAX_RANDOM_SYMBOLS:,} dfa check reads here; use --random-len "
            f"{MAX_RANDOM_SYMBOLS // n_random:,} or less, or fewer --random strings"
        )


def _print_check(report: VerifyReport, dtype: str) -> None:
    out = console()
    out.print(
        f"{report.exhaustive_strings:,} strings of length 0..{report.max_len} and "
        f"{report.random_prefixes:,} prefixes of {report.random_strings} random strings of length "
        f"{report.random_len:,}: {report.mismatches} mismatches, max |RNN − DFA| = {report.max_abs_error}, "
        f"hidden state one-hot throughout: {'yes' if report.hidden_one_hot else 'NO'} "
        f"({report.hidden} units, {dtype}, {report.seconds:.2f} s)",
        highlight=False,
    )
    if report.ok:
        out.print("[bold]exact[/bold]: the RNN equals the DFA on everything checked, no drift")
    else:
        out.print(f"MISMATCH: first on {report.first_mismatch!r}", markup=False)


@dfa.command("minimize")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--out", "-o", type=OutputFile("minimal.json"), help="Write the minimal DFA here (JSON).")
@json_option
def dfa_minimize(file: Path, out: Path | None, json_out: bool) -> None:
    """Minimize a DFA (Hopcroft) and show which states merged."""
    from ..formal.dfa import minimize_with_blocks, save_dfa

    machine = _load(file)
    minimal, blocks = minimize_with_blocks(machine)
    if out is not None:
        save_dfa(minimal, out)
    emit(
        {
            "states_before": machine.n_states,
            "states_after": minimal.n_states,
            "unreachable": machine.unreachable(),
            "blocks": blocks,
            "dfa": minimal.to_dict(),
        },
        lambda m: _print_minimization(m, out),
        json_out,
    )


def _print_minimization(m: dict, written: Path | None) -> None:
    out = console()
    out.print(
        f"{m['states_before']} states → {m['states_after']} (minimal)"
        + (f"; {len(m['unreachable'])} unreachable dropped" if m["unreachable"] else "")
    )
    for name, block in zip(m["dfa"]["states"], m["blocks"]):
        if len(block) > 1:
            out.print(f"  {name} ← {', '.join(block)}", highlight=False, markup=False)
    if written is not None:
        out.print(f"written to {written}")


@dfa.command("equiv")
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@json_option
def dfa_equiv(a: Path, b: Path, json_out: bool) -> None:
    """Do two DFAs accept the same language? If not, a shortest string where they differ (exit code 1)."""
    x, y = _load(a), _load(b)
    witness = x.counterexample(y)
    emit(
        {
            "equivalent": witness is None,
            "counterexample": witness,
            "accepted_by": None if witness is None else (str(a) if x.accepts(witness) else str(b)),
        },
        _print_equivalence,
        json_out,
    )
    if witness is not None:
        click.get_current_context().exit(1)


def _print_equivalence(e: dict) -> None:
    if e["equivalent"]:
        console().print("equivalent: the two DFAs accept the same language")
    else:
        console().print(
            f"not equivalent: {e['counterexample'] or 'ε'!r} is accepted by {e['accepted_by']} only",
            highlight=False,
            markup=False,
        )


@dfa.command("run")
@click.argument("file", type=click.Path(path_type=Path))
@click.argument("words", nargs=-1)
@json_option
def dfa_run(file: Path, words: tuple[str, ...], json_out: bool) -> None:
    """Accept or reject each WORD (one character per symbol; '' is the empty string)."""
    machine = _load(file)
    results = [{"word": w, "accepted": machine.accepts(w), "state": machine.run(w)} for w in words]
    emit(results, _print_word_verdicts, json_out)


def _print_word_verdicts(results: list) -> None:
    for r in results:
        click.echo(f"{r['word'] or 'ε'}\t{'accept' if r['accepted'] else 'reject'}\t({r['state']})")


# ---- dyck ------------------------------------------------------------------------------------------


@click.group()
def dyck() -> None:
    """Dyck-(k, m) languages: generate, recognize, the depth experiment, the finite-precision bound."""


@dyck.command("generate")
@click.option("--k", "k", type=BRACKETS, default=2, show_default=True, help="Bracket types.")
@click.option("--m", "m", type=DEPTH, default=4, show_default=True, help="Maximum depth.")
@click.option(
    "--n",
    "n",
    type=count(MAX_STRINGS, "strings sampled here", min=None),
    default=10,
    show_default=True,
    help="Number of strings.",
)
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--p-end", type=finite(), default=0.5, show_default=True, help="Probability of END when the stack is empty.")
@click.option(
    "--max-len", type=count(MAX_STRING_LEN, "tokens of a string here", min=None), help="Resample strings longer than this."
)
@json_option
def dyck_generate(k: int, m: int, n: int, seed: int, p_end: float, max_len: int | None, json_out: bool) -> None:
    """Sample Dyck-(k, m) strings (Hewitt et al. 2020) and show their depth statistics."""
    _positive(k, "--k", "the number of bracket types")
    _positive(m, "--m", "the maximum depth")
    _positive(n, "--n", "the number of strings")
    from ..formal.dyck import depth_stats, generate, to_string

    with working(f"sampling {n:,} Dyck-({k}, {m}) strings"):
        seqs = generate(k, m, n, seed=seed, p_end=p_end, max_len=max_len)
        stats = depth_stats(seqs, k)
    emit(
        {"k": k, "m": m, "strings": [to_string(s, k) for s in seqs], "tokens": seqs, "stats": stats},
        _print_dyck_strings,
        json_out,
    )


def _print_dyck_strings(generated: dict) -> None:
    for s in generated["strings"]:
        click.echo(s)
    stats = generated["stats"]
    console().print(
        f"{stats.sequences} strings, mean length {stats.mean_length:.1f} (max {stats.max_length}), "
        f"maximum depth: " + ", ".join(f"{d}: {c}" for d, c in stats.max_depth_counts.items()),
        highlight=False,
    )


@dyck.command("recognize")
@click.argument("strings", nargs=-1, required=True)
@click.option("--k", "k", type=BRACKETS, default=2, show_default=True, help="Bracket types.")
@click.option("--m", "m", type=DEPTH, help="Maximum depth (default: unbounded).")
@json_option
def dyck_recognize(strings: tuple[str, ...], k: int, m: int | None, json_out: bool) -> None:
    """Is each STRING in Dyck-(k, m)? Brackets ( [ { < and ) ] } >, END is $."""
    _positive(k, "--k", "the number of bracket types")
    if m is not None:
        _positive(m, "--m", "the maximum depth")
    from ..formal.dyck import from_string, max_depth, recognize

    results = []
    for s in strings:
        tokens = from_string(s, k)
        results.append({"string": s, "valid": recognize(tokens, k, m), "max_depth": max_depth(tokens, k)})
    emit(results, _print_recognized, json_out)


def _print_recognized(results: list) -> None:
    for r in results:
        click.echo(f"{r['string'] or 'ε'}\t{'valid' if r['valid'] else 'invalid'}\t(depth {r['max_depth']})")


@dyck.command("experiment")
@click.option("--k", "k", type=BRACKETS, default=2, show_default=True, help="Bracket types.")
@click.option("--train-depth", type=DEPTH, default=4, show_default=True, help="Train on strings of depth ≤ this.")
@click.option("--test-depth", type=DEPTH, default=8, show_default=True, help="Evaluate at every depth up to this.")
@click.option(
    "--seeds", type=count(MAX_SEEDS, "seeds per model here", min=None), default=3, show_default=True, help="Seeds per model."
)
@click.option("--models", default="relu-rnn,lstm,transformer", show_default=True, help="Comma-separated.")
@click.option("--hidden", type=HIDDEN, default=32, show_default=True, help="Hidden size (the transformer's d_model).")
@click.option(
    "--steps",
    type=count(MAX_STEPS, "steps per model and seed here", min=None),
    default=1500,
    show_default=True,
    help="Training steps per model and seed.",
)
@click.option(
    "--eval-sequences",
    type=count(MAX_STRINGS, "test strings per depth here", min=None),
    default=100,
    show_default=True,
    help="Test strings per depth.",
)
@click.option(
    "--max-len",
    type=count(MAX_CONTEXT, "tokens of context here", min=None),
    default=128,
    show_default=True,
    help="Longest string (tokens); the transformer's context.",
)
@click.option(
    "--threads",
    type=count(MAX_PROCESSES, "torch threads here", min=None),
    default=1,
    show_default=True,
    help="torch threads (1 is fastest on a busy 2-core machine).",
)
@click.option(
    "--plot",
    type=OutputFile("dyck-depth.png", ".png"),
    help="PNG of accuracy against depth (default: runs/figures/<time>-dyck-depth.png).",
)
@json_option
def dyck_experiment(
    k: int,
    train_depth: int,
    test_depth: int,
    seeds: int,
    models: str,
    hidden: int,
    steps: int,
    eval_sequences: int,
    max_len: int,
    threads: int,
    plot: Path | None,
    json_out: bool,
) -> None:
    """Train a ReLU-RNN, an LSTM and a small nanolm transformer on shallow Dyck-k strings and measure
    next-token-set accuracy at every depth up to --test-depth."""
    _positive(k, "--k", "the number of bracket types")
    _positive(train_depth, "--train-depth", "the maximum training depth")
    _positive(test_depth, "--test-depth", "the maximum test depth")
    from ..formal.experiment import DyckExperimentConfig, experiment_figure, run_dyck_experiment
    from ..plots import save_figure

    cfg = DyckExperimentConfig(
        k=k,
        train_depth=train_depth,
        test_depth=test_depth,
        seeds=seeds,
        models=tuple(m.strip() for m in models.split(",") if m.strip()),
        hidden=hidden,
        steps=steps,
        eval_sequences=eval_sequences,
        max_len=max_len,
        threads=threads,
    ).validate()
    plot = plot or default_output(FIGURES, "dyck-depth.png")

    def progress(info: TrainedModel, got: list[DepthAccuracy]) -> None:  # stderr, so --json output stays clean
        by_depth = {g.depth: g for g in got}
        click.echo(
            f"{info.model:<11} seed {info.seed}: {info.seconds:5.1f} s, loss {info.final_loss:.4f}; "
            f"sequence accuracy at depth {train_depth}: {by_depth[train_depth].sequence_accuracy:.2f}, "
            f"at depth {test_depth}: {by_depth[test_depth].sequence_accuracy:.2f}",
            err=True,
        )

    result = run_dyck_experiment(cfg, on_progress=progress)
    result.plot = save_figure(experiment_figure(result), plot)
    emit(result, print_experiment, json_out)


def print_experiment(result: DyckExperimentResult, out: Console | None = None) -> None:
    """The experiment's tables and notes, on `out` (a rich console; default: stdout)."""
    from rich.table import Table

    from ..formal.precision import format_depth

    if out is None:
        out = console()
    cfg = result.config
    names = list(dict.fromkeys(s.model for s in result.summary))
    cell = {(s.model, s.depth): s for s in result.summary}
    for key, title in (("position", "per-position accuracy"), ("sequence", "whole-sequence accuracy")):
        table = Table(title=f"{title}, Dyck-{cfg.k} trained on depth ≤ {cfg.train_depth}: mean (min–max) of {cfg.seeds} seed(s)")
        table.add_column("depth", justify="right")
        table.add_column("mean len", justify="right")
        for name in names:
            table.add_column(name, justify="right")
        for d in sorted({s.depth for s in result.summary}):
            row = [f"{d}{' *' if d > cfg.train_depth else ''}", f"{result.test_mean_length[d]:.0f}"]
            for name in names:
                s = cell[(name, d)]
                row.append(f"{getattr(s, key + '_mean'):.3f} ({getattr(s, key + '_min'):.3f}–{getattr(s, key + '_max'):.3f})")
            table.add_row(*row)
        out.print(table)
    stack = {(s.model, s.stack_depth): s for s in result.deepest_by_stack_depth}
    table = Table(title=f"per-position accuracy on the depth-{cfg.test_depth} strings, by the stack depth at the position")
    table.add_column("stack depth", justify="right")
    for name in names:
        table.add_column(name, justify="right")
    for d in sorted({s.stack_depth for s in result.deepest_by_stack_depth}):
        table.add_row(
            f"{d}{' *' if d > cfg.train_depth else ''}",
            *(
                f"{stack[(n, d)].mean:.3f} ({stack[(n, d)].min:.3f}–{stack[(n, d)].max:.3f})" if (n, d) in stack else "-"
                for n in names
            ),
        )
    out.print(table)
    ts = result.train_stats
    out.print(
        f"* deeper than any training string. Training: {ts.sequences} strings per seed, mean length "
        f"{ts.mean_length:.0f} (max {ts.max_length}); {cfg.steps} steps of {cfg.batch_size}; "
        f"hidden {cfg.hidden}; {result.seconds:.0f} s in all.",
        highlight=False,
    )
    params = {r.model: r.parameters for r in result.runs}
    out.print("parameters: " + ", ".join(f"{n} {p:,}" for n, p in params.items()), highlight=False)
    for row in result.precision.rows:
        out.print(
            f"finite precision: {row.hidden} units at {row.precision} give at most 10^{row.log10_states:.0f} "
            f"states, enough for every Dyck-{cfg.k} stack up to depth {format_depth(row)}",
            highlight=False,
        )
    if result.plot is not None:
        out.print(f"plot written to {result.plot}")


@dyck.command("precision")
@click.option("--k", "k", type=BRACKETS, default=2, show_default=True, help="Bracket types.")
@click.option("--hidden", "-h", "hidden", type=HIDDEN, multiple=True, help="Hidden sizes (repeatable; default 1 8 64 256).")
@click.option(
    "--precision", "-p", "precisions", multiple=True, help="int8, bf16, fp16, fp32 (repeatable; default int8 bf16 fp32)."
)
@json_option
def dyck_precision(k: int, hidden: tuple[int, ...], precisions: tuple[str, ...], json_out: bool) -> None:
    """The deepest Dyck-k stack a hidden state of h units at a given precision can tell apart."""
    _positive(k, "--k", "the number of bracket types")
    from ..formal.precision import precision_table

    table_data = precision_table(k, hidden or (1, 8, 64, 256), precisions or ("int8", "bf16", "fp32"))
    emit(table_data, _print_precision_table, json_out)


def _print_precision_table(table_data: PrecisionTable) -> None:
    from rich.table import Table

    from ..formal.precision import format_depth

    k = table_data.k
    table = Table(title=f"Dyck-{k}: the deepest d with Σ_{{j≤d}} {k}^j ≤ V^h states")
    for col in ("precision", "values per unit V", "units h", "states V^h", "max depth d"):
        table.add_column(col, justify="left" if col == "precision" else "right")
    for r in table_data.rows:
        table.add_row(r.precision, f"{r.values_per_unit:,}", str(r.hidden), f"10^{r.log10_states:.1f}", format_depth(r))
    console().print(table)
