"""``nanolm problems``: graded exercises in the working folder, a thin click group over
nanolm.problems. Grading happens in a separate process; nothing here imports torch."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import UserError
from .output import SEED, Count, console, count, emit, finite, json_option, warn, working

if TYPE_CHECKING:
    from ..problems.grading import CheckResult
    from ..problems.quiz import Card
    from ..problems.selftest import Score
    from ..problems.workspace import Hint, ProblemStatus, Solution, Workspace

TIMEOUT_HELP = "Seconds the grading process may run before it is stopped (an infinite loop is a harness error)."
MAX_TIMEOUT = 86_400.0  # seconds a grading process may be given: a day
MAX_MINUTES = 7 * 24 * 60  # --timed: a week
MAX_CHECKS = 1_000_000  # checks one watch runs


def _workspace() -> Workspace:
    from ..problems.workspace import Workspace

    return Workspace(Path.cwd())


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


@click.group()
def problems() -> None:
    """Graded problems: start one, edit its file, check it (hints one at a time, the solution once solved).

    \b
    nanolm problems list                 the problems, their skills, points and your progress
    nanolm problems start logit_lens     writes logit_lens/logit_lens.py and logit_lens/instructions.md
    nanolm problems check logit_lens     grades it: exit 0 solved, 1 not yet, 2 could not grade
    nanolm problems watch                re-checks every started problem on each save
    nanolm problems quiz                 the week's self-check as flash cards (y/n marks kept)
    nanolm problems selftest             the graders' own test: mutants killed / total, per problem

    Progress is kept in nanolm-problems.json in the working folder.
    """


@problems.command("list")
@json_option
def list_cmd(json_out: bool) -> None:
    """The problems: name, skill, points, status, hints used."""
    rows = _workspace().statuses()
    emit(rows, _print_list, json_out)


def _print_list(rows: list[ProblemStatus]) -> None:
    from rich.table import Table

    table = Table(title="nanolm problems")
    for col in ("problem", "skill", "points", "checks", "status", "hints"):
        table.add_column(col, justify="right" if col in ("points", "checks", "hints") else "left")
    for r in rows:
        status = {"solved": "[green]solved[/green]", "started": "[yellow]started[/yellow]"}.get(r.status, r.status)
        table.add_row(r.name, _escape(r.skill), str(r.points), str(r.checks), status, f"{r.hints_used}/{r.hints_total}")
    con = console()
    con.print(table)
    solved = [r for r in rows if r.status == "solved"]
    con.print(
        f"{len(solved)} of {len(rows)} solved, {sum(r.points for r in solved)} of {sum(r.points for r in rows)} "
        "points. Start one with: nanolm problems start NAME",
        highlight=False,
    )
    con.print("The week's self-check as flash cards: nanolm problems quiz", highlight=False)


@problems.command()
@click.argument("name")
@click.option(
    "--dir",
    "dir_",
    type=click.Path(file_okay=False, path_type=Path),
    help="The folder to write the files into (default: ./NAME).",
)
@click.option(
    "--timed",
    type=count(MAX_MINUTES, "minutes of a week"),
    metavar="MINUTES",
    help="A time limit: each check shows the time since start against it (e.g. 15, the checkpoint's).",
)
@json_option
def start(name: str, dir_: Path | None, timed: int | None, json_out: bool) -> None:
    """Write the problem's starter file and instructions.md (nothing else; never over your file)."""
    started = _workspace().start(name, dir_, timed or 0)
    emit(
        started,
        lambda s: console().print(
            _escape(
                f"wrote {', '.join(s.files[:-1])} and {s.files[-1]}: read the instructions, edit the file, then run "
                f"`nanolm problems check {s.problem}`"
            ),
            highlight=False,
        ),
        json_out,
    )


@problems.command()
@click.argument("name")
@click.option("--seed", type=SEED, help="The checks' random draws (default: fresh each time).")
@click.option("--timeout", type=finite(min=0.1, max=MAX_TIMEOUT), default=120.0, show_default=True, help=TIMEOUT_HELP)
@json_option
@click.pass_context
def check(ctx: click.Context, name: str, seed: int | None, timeout: float, json_out: bool) -> None:
    """Grade your file in a separate process, check by check. Exit 0 solved, 1 not yet solved, 2 not graded."""
    ws = _workspace()
    with working(f"checking {name}"):
        result = ws.check(name, seed, timeout)
    if result.status == "error" and not json_out:
        raise UserError(result.summary())
    emit(result, _print_check, json_out, as_json=check_json(result))
    ctx.exit(result.exit_code)


def check_json(result: CheckResult) -> dict:
    """The result as the JSON `check --json` prints (the dataclass, plus its counts and exit code)."""
    from dataclasses import asdict

    return {
        **asdict(result),
        "passed": result.passed,
        "total": result.total,
        "bugs_fixed": result.bugs_fixed,
        "exit_code": result.exit_code,
        "summary": result.summary(),
    }


def _print_check(result: CheckResult) -> None:
    con = console()
    for i, t in enumerate(result.tests, 1):
        label = f"bug {i} ({t.name})" if i <= result.bugs else t.name
        mark = "[green]✓[/green]" if t.passed else "[red]✗[/red]"
        con.print(f"{mark} {_escape(label)}: {_escape(t.title)}", highlight=False)
        if not t.passed:
            con.print(f"    {_escape(t.message)}", highlight=False)
    con.print(_escape(f"{result.summary()}  (seed {result.seed}, {result.seconds:.1f} s)"), highlight=False)
    if result.note:
        con.print(_escape(result.note), highlight=False)
    if result.status == "solved":
        con.print(_escape(f"see the reference solution with: nanolm problems solution {result.problem}"), highlight=False)


@problems.command()
@click.argument("name")
@json_option
def hint(name: str, json_out: bool) -> None:
    """The next hint (one at a time; each is recorded)."""
    h = _workspace().hint(name)
    emit(h, _print_hint, json_out)


def _print_hint(h: Hint) -> None:
    con = console()
    con.print(_escape(f"hint {h.number} of {h.total} for {h.problem}:"), highlight=False)
    con.print(_escape(h.text), highlight=False)
    if not h.new:
        warn(f"that was the last hint of {h.problem}; it is shown again")


@problems.command()
@click.argument("name")
@json_option
def reset(name: str, json_out: bool) -> None:
    """Write the starter file again (yours is kept as FILE.bak) and clear the solved mark."""
    r = _workspace().reset(name)
    emit(
        r,
        lambda r: console().print(
            _escape(f"wrote the starter to {r.file}" + (f"; your file is kept as {r.backup}" if r.backup else "")),
            highlight=False,
        ),
        json_out,
    )


@problems.command()
@click.argument("name")
@json_option
def solution(name: str, json_out: bool) -> None:
    """The reference solution, printed (only once the problem is solved)."""
    s = _workspace().solution(name)
    emit(s, _print_solution, json_out)


def _print_solution(s: Solution) -> None:
    click.echo(s.source, nl=False)
    if s.bugs:
        click.echo("\nThe planted bugs were:")
        for i, b in enumerate(s.bugs, 1):
            click.echo(f"  {i}. {b}")


@problems.command()
@click.argument("names", nargs=-1)
@click.option(
    "--interval",
    type=finite(min=0.05, max=3600.0),
    default=0.5,
    show_default=True,
    help="Seconds between looks at the files (polling, so it works where file events do not arrive).",
)
@click.option("--max-checks", type=count(MAX_CHECKS, "checks a watch runs here"), help="Stop after this many checks.")
@click.option("--once", is_flag=True, help="Check each watched problem once and stop.")
@click.option("--seed", type=SEED, help="The checks' random draws (default: fresh each time).")
@click.option("--timeout", type=finite(min=0.1, max=MAX_TIMEOUT), default=120.0, show_default=True, help=TIMEOUT_HELP)
@click.pass_context
def watch(
    ctx: click.Context,
    names: tuple[str, ...],
    interval: float,
    max_checks: int | None,
    once: bool,
    seed: int | None,
    timeout: float,
) -> None:
    """Re-check on every save: the problems named, else every started problem not yet solved. Ctrl-C stops."""
    from ..problems.workspace import watch as watch_loop

    ws = _workspace()
    watched = ws.watched(list(names))
    if not watched:
        raise UserError("nothing to watch: no started problem is unsolved; start one with: nanolm problems start NAME")
    con = console()
    con.print(_escape(f"watching {', '.join(watched)} (every {interval:g} s; Ctrl-C stops)"), highlight=False)
    last: dict[str, int] = {}
    for result in watch_loop(ws, watched, interval, max_checks, once, seed, timeout):
        last[result.problem] = result.exit_code
        if result.status == "error":
            con.print(_escape(result.summary()), highlight=False)
        else:
            _print_check(result)
    ctx.exit(max(last.values(), default=1))


@problems.command()
@click.option("--all", "everything", is_flag=True, help="Go through every card, also those already marked ✓.")
@click.option("--missed", is_flag=True, help="Only the cards marked ✗.")
@click.option("--limit", type=Count(min=1), help="Stop after this many cards.")
@click.option("--status", "status_only", is_flag=True, help="Only the counts and the checkpoint threshold.")
@click.option("--reset", is_flag=True, help="Clear every mark first.")
@json_option
def quiz(everything: bool, missed: bool, limit: int | None, status_only: bool, reset: bool, json_out: bool) -> None:
    """The week's self-check as flash cards: the question, Enter shows the answer, then y (knew it) or n.

    \b
    Marks are kept in nanolm-problems.json; each run asks the cards not yet marked ✓ (unanswered first,
    then the missed ones). q at any prompt stops, keeping the marks so far. The checkpoint threshold
    (at least 20 ✓ and at most 3 ✗) is shown at the end."""
    from ..problems.quiz import load_deck, status, to_ask

    if everything and missed:
        raise UserError("--all and --missed ask different cards; give one of them")
    if json_out and not status_only:
        raise UserError("--json prints the counts only: use it with --status (the quiz itself is interactive)")
    ws = _workspace()
    deck = load_deck()
    if reset:
        ws.reset_quiz()
    if not status_only:
        cards = to_ask(deck, ws.quiz, everything, missed)[:limit]
        _ask_cards(ws, cards, len(deck.cards))
    emit(status(deck, ws.quiz), lambda s: console().print(_escape(s.summary()), highlight=False), json_out)


def _ask_cards(ws: Workspace, cards: list[Card], total: int) -> None:
    con = console()
    if not cards:
        con.print("no card to ask: every card is marked ✓ (go through them again with --all)", highlight=False)
        return
    con.print(_escape(f"{len(cards)} card(s) of {total}; Enter shows the answer, then y or n; q stops"), highlight=False)
    for i, card in enumerate(cards, 1):
        con.print(_escape(f"\n[{i}/{len(cards)}] ({card.source}) {card.question}"), highlight=False)
        try:
            if click.prompt("Enter shows the answer", default="", show_default=False).strip().lower() == "q":
                return
            con.print(_escape(card.answer), highlight=False)
            mark = click.prompt("Did you know it? (y/n, q stops)", type=click.Choice(["y", "n", "q"]), show_choices=False)
        except click.Abort:  # end of input or Ctrl-C: keep the marks so far
            con.print("")
            return
        if mark == "q":
            return
        ws.mark_card(card.id, mark)


@problems.command()
@click.argument("names", nargs=-1)
@click.option(
    "--seed",
    type=SEED,
    default=0,
    show_default=True,
    help="The checks' random draws (fixed, so that a score can be compared with the last one).",
)
@click.option(
    "--mutants",
    "mutants_dir",
    type=click.Path(path_type=Path),
    help="The folder of mutants, one sub-folder per problem (default: tests/problems_mutants of this checkout).",
)
@click.option(
    "--timeout",
    type=finite(min=1.0, max=MAX_TIMEOUT),
    default=600.0,
    show_default=True,
    help="Seconds each problem's grading process (all its mutants) may run.",
)
@json_option
@click.pass_context
def selftest(
    ctx: click.Context, names: tuple[str, ...], seed: int, mutants_dir: Path | None, timeout: float, json_out: bool
) -> None:
    """The graders' own test: grade every problem's mutants, the plausible wrong solutions kept in the
    checkout's tests/problems_mutants/, and print the mutation score, killed / total.

    A mutant is killed when a failing check's message names its mistake (the phrases its header expects).
    Each problem's reference solution is graded too and must pass. Exit 0 when every reference passes and
    every mutant is killed, 1 otherwise."""
    from ..problems.selftest import selftest as run_selftest

    with working("grading the mutants"):
        scores = run_selftest(list(names) or None, mutants_dir, seed, timeout)
    emit(scores, _print_scores, json_out, as_json=[{**_asdict(s), "ok": s.ok} for s in scores])
    ctx.exit(0 if all(s.ok for s in scores) else 1)


def _asdict(obj: Score) -> dict:
    from dataclasses import asdict

    return asdict(obj)


def _print_scores(scores: list[Score]) -> None:
    from rich.table import Table

    table = Table(title="mutation score: mutants killed / total")
    for col in ("problem", "killed", "reference", "seconds"):
        table.add_column(col, justify="right" if col in ("killed", "seconds") else "left")
    for s in scores:
        killed = f"{s.killed}/{s.total}"
        table.add_row(
            s.problem,
            killed if s.killed == s.total else f"[red]{killed}[/red]",
            "passes" if s.reference == "solved" else f"[red]{_escape(s.reference)}[/red]",
            f"{s.seconds:.1f}",
        )
    con = console()
    con.print(table)
    for s in scores:
        if s.reference != "solved":
            con.print(_escape(f"{s.problem}: the reference solution does not pass: {s.reference_message}"), highlight=False)
        for v in s.mutants:
            if not v.killed:
                con.print(_escape(f"{s.problem}/{v.name} survived ({v.mistake}): {v.message}"), highlight=False)
    killed, total = sum(s.killed for s in scores), sum(s.total for s in scores)
    con.print(f"{killed} of {total} mutants killed" + ("" if killed == total else "; the survivors above"), highlight=False)
