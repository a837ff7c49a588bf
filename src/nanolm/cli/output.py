"""What every command group shares: the console, JSON output, the common options, one warning
format, spinners and progress bars on stderr, the click type for output files, and a command's result
saved in its run (``save_run_result``) with the run's page written after it (``--report``).

Only click is imported at the top, so ``nanolm --help`` stays fast (no torch)."""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..errors import UserError
from ..io import check_writable_file, to_jsonable
from ..runs.artifacts import Artifact

if TYPE_CHECKING:
    from typing import TypeVar

    R = TypeVar("R")  # a command's result: what emit renders (a type checker's name only, never defined at run time)

WARNING_PREFIX = "nanolm: warning: "


# ---- options shared by the command groups -----------------------------------------------------


def set_option(f):
    return click.option(
        "--set", "set_", multiple=True, metavar="KEY=VALUE", help="Config override (repeatable), e.g. --set lr=1e-3."
    )(f)


def json_option(f):
    return click.option("--json", "json_out", is_flag=True, help="Print the result as JSON on stdout.")(f)


def runs_dir_option(f):
    return click.option("--runs-dir", default="runs", show_default=True, help="Folder of run records.")(f)


class OutputFile(click.ParamType):
    """A path the command will write a file to, checked while the arguments are parsed, so a typo in
    it is one line (a UserError) before any work is done, not a traceback after it."""

    name = "file"

    def __init__(self, example: str, suffix: str | None = None) -> None:
        self.example = example  # a file name the error message suggests inside a folder given by mistake
        self.suffix = suffix  # the one format written (".png"): another name would hide what the file is

    def convert(self, value, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        path = Path(value)
        if self.suffix is not None and not path.is_dir() and path.suffix.lower() != self.suffix:
            raise UserError(
                f"{_option_name(param)} {path}: this is written as {self.suffix[1:].upper()}; give a name "
                f"ending in {self.suffix}, e.g. {path.with_suffix(self.suffix).name}"
            )
        return check_writable_file(path, _option_name(param), self.example)


def default_output(kind: Artifact, name: str) -> Path:
    """runs/<kind's folder>/<time>-<name>: where a command's file goes when the user names none and there is
    no run to keep it (Artifact.loose), checked writable before the work."""
    return check_writable_file(kind.loose(name), "the output", name)


def _option_name(param: click.Parameter | None) -> str:
    if param is None:
        return "the output path"
    return max(param.opts, key=len) if param.opts else param.name or "the output path"


class GroupWithModules(click.Group):
    """A command group some of whose subcommands live in other modules of nanolm.cli (`elsewhere`: name ->
    (module, attribute)), imported when the group lists them or one runs. The group is whole however it is
    reached: through `nanolm`, or by importing its module in a notebook or a test."""

    def __init__(self, *args: Any, elsewhere: dict[str, tuple[str, str]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.elsewhere = dict(elsewhere or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.elsewhere})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.elsewhere and cmd_name not in self.commands:
            import importlib

            module, attribute = self.elsewhere[cmd_name]
            self.add_command(getattr(importlib.import_module(f"{__package__}.{module}"), attribute), cmd_name)
        return super().get_command(ctx, cmd_name)


# ---- numbers: finite floats and bounded integers ----------------------------------------------

INT64_MAX = 2**63 - 1  # the largest integer any option or config key takes (torch and numpy stop at 64 bits)
INT64_MIN = -(2**63)


def flag(param: click.Parameter | None) -> str:
    """An option's longest flag ("--temperature"), or the parameter's name."""
    if param is None:
        return "the value"
    return max(param.opts, key=len) if param.opts else param.name or "the value"


def too_many(value: int, most: int, what: str = "") -> str:
    """ "100000000 is more than the 4096 samples best-of-n draws per prompt; use at most 4096": the words for a count
    past its largest value (what: what the count counts, read after that value; none: a plain limit)."""
    if what:
        return f"{value} is more than the {most} {what}; use at most {most}"
    if most == INT64_MAX:
        return f"{value} is more than {most}, the largest integer nanolm takes (64 bits); use at most {most}"
    return f"{value} is more than {most}, the largest value it takes; use at most {most}"


def check_count(value: int, option: str, most: int, what: str = "", least: int | None = None) -> int:
    """value, once it is in least..most; else a UserError naming option and the bound (for numbers parsed by hand,
    such as the items of a comma-separated list)."""
    if value > most:
        raise UserError(f"{option} {too_many(value, most, what)}")
    low = INT64_MIN if least is None else least
    if value < low:
        raise UserError(f"{option} {value} is less than {low}; use at least {low}")
    return value


def check_finite(value: float, option: str) -> float:
    """value, once it is a finite number; else a UserError naming option (for numbers parsed by hand)."""
    if not math.isfinite(value):
        raise UserError(f"{option} {value}: not a finite number; give a number such as 0.5")
    return value


class Finite(click.FloatRange):
    """A float option that refuses nan, inf and -inf (Python's float() reads them, and click's FLOAT and FloatRange
    pass them on), within an optional range (click's FloatRange: min, max, min_open, max_open). Every float option
    of the CLI has this type (tests/test_bad_input_numbers.py walks the commands to check)."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value} is not a finite number; give e.g. {flag(param)} {self._example(param)}", param, ctx)
        return super().convert(number, param, ctx)

    def _example(self, param: click.Parameter | None) -> str:
        """A value the option takes, for the error message: its default, else one inside the range."""
        default = getattr(param, "default", None)
        if isinstance(default, (int, float)) and not isinstance(default, bool) and math.isfinite(default):
            return f"{default:g}"
        if self.min is not None and self.max is not None:
            return f"{(self.min + self.max) / 2:g}"
        if self.min is not None:
            return f"{self.min + 1 if self.min_open else self.min:g}"
        if self.max is not None:
            return f"{self.max - 1 if self.max_open else self.max:g}"
        return "1"

    def _describe_range(self) -> str:
        return "" if self.min is None and self.max is None else super()._describe_range()


def finite(min: float | None = None, max: float | None = None, min_open: bool = False, max_open: bool = False) -> Finite:
    """The type of a float option: a finite number, in the range given (none: any finite number)."""
    return Finite(min=min, max=max, min_open=min_open, max_open=max_open)


class Count(click.IntRange):
    """An integer option with a largest value, refused with one line naming it (`too_many`): a count whose work could
    not finish (samples, tokens, steps) stops at a size no honest use of these small models reaches; any other
    integer stops at 64 bits. min: the least value (none: -2**63)."""

    name = "integer"

    def __init__(self, max: int = INT64_MAX, what: str = "", min: int | None = None) -> None:
        super().__init__(min=min, max=max)
        self.what = what

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        number = click.INT.convert(value, param, ctx)
        if number > self.max:
            self.fail(too_many(number, self.max, self.what), param, ctx)
        low = INT64_MIN if self.min is None else self.min
        if number < low:
            self.fail(f"{number} is less than {low}; use at least {low}", param, ctx)
        return number

    def _describe_range(self) -> str:
        """The range --help shows, without the 64-bit bound every integer has."""
        upper = self.max != INT64_MAX
        if self.min is None:
            return f"x<={self.max}" if upper else ""
        return f"{self.min}<=x<={self.max}" if upper else f"x>={self.min}"


def count(max: int, what: str, min: int | None = 1) -> Count:
    """The type of a count option: min..max (1 up by default), `what` it counts named in the message past max."""
    return Count(max=max, what=what, min=min)


class StepSlice(click.ParamType):
    """A range of ProfilerStep numbers as a Python slice, "A:B" (A <= k < B), "A:" or ":B": (A or None, B or None)."""

    name = "A:B"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[int | None, int | None]:
        if isinstance(value, tuple):
            return value
        text = str(value).strip()
        first, colon, stop = text.partition(":")
        ends = [first.strip(), stop.strip()]
        if (
            not colon
            or not any(ends)
            or not all(e.isascii() and e.isdigit() or not e for e in ends)
            or any(len(e) > 18 for e in ends)
        ):
            self.fail(
                f"{value!r} is not a range of step numbers; give A:B (ProfilerStep#A up to #B, B left out), A: or :B", param, ctx
            )
        a, b = (int(e) if e else None for e in ends)
        if a is not None and b is not None and b <= a:
            self.fail(f"{value!r} holds no step (B must be past A); give e.g. {a}:{a + 3}", param, ctx)
        return a, b


INTEGER = Count()  # any 64-bit integer (an index, a layer: what it may be is checked against the model)
SEED = Count(min=0)  # a seed: 0 to 2**63 - 1

# The largest counts the commands share. Each is far past honest use on nanolm's small models (a default is
# 20 tokens, 300 steps, 3 seeds) and stops a typo's extra zeros before work that would not finish.
MAX_STEPS = 1_000_000  # optimizer steps of a lens, reward model, SAE or Dyck model: hours at the smallest size
MAX_NEW_TOKENS = 10_000  # tokens generated per text or prompt
MAX_TOP_K = 1_000_000  # top-k: past any vocabulary here (GPT-2's has 50,257 tokens)
MAX_SEEDS = 1_000  # seeds of one command (each is a whole run or a whole pass)
MAX_PROCESSES = 1_024  # processes or jobs at a time on one machine (--nproc, --jobs)


# ---- stdout: tables and JSON ------------------------------------------------------------------


def console():
    """The rich console results are printed on (stdout). A table printed on it that would wrap a cell into more
    than 3 lines at the terminal's width (80 columns, say) is printed as a list of its rows instead, with the
    same cells (nanolm.layout)."""
    from rich.console import Console

    from ..layout import fitting

    return fitting(Console())


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable(obj), indent=2) + "\n")


def warn(message: str) -> None:
    """One warning line on stderr, in the one format every command uses."""
    click.echo(f"{WARNING_PREFIX}{message}", err=True)


def fewer_than_asked(option: str, asked: int, got: int, source: str, unit: str, used: str, fix: str) -> list[str]:
    """The one warning line when `source` gave fewer `unit` than `option` asked for (a silent cap otherwise):
    asked, what there was, what the command used and how to get more; none when nothing was short."""
    if got >= asked:
        return []
    return [f"{option} {asked:,} asked, but {source} has {got:,} {unit}: {used}; {fix}"]


def given_on_command_line(name: str) -> bool:
    """The option `name` (its parameter name) was given by the user, not left to its default."""
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    return ctx is not None and ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE


def emit(result: R, render: Callable[[R], None], json_out: bool, warnings: Iterable[str] = (), as_json: Any = None) -> None:
    """The shape every command ends with: warnings on stderr, then the result as JSON (`as_json`, or
    the result itself) when --json was given, else `render(result)` for a person."""
    for w in warnings:
        warn(w)
    if json_out:
        print_json(result if as_json is None else as_json)
    else:
        render(result)


# ---- a command's result in its run, and the run's page (--report) ---------------------------------


def save_result(path: str | Path, result: Any) -> Path:
    """Write `result` at path as the JSON --json prints (to_jsonable), atomically; the path."""
    from ..io import atomic_write_json

    atomic_write_json(path, to_jsonable(result))
    return Path(path)


def save_run_result(run_dir: str | Path | None, kind: Artifact, name: str, result: Any) -> Path | None:
    """Save a command's --json result in its run, at RUN/<kind's folder>/<name>.json (written atomically), where
    `nanolm report` reads it; every run of the command saves it, --json given or not, replacing the last
    one of that name (as the command's figure is replaced). The path; None when there is no run (a model
    folder that is not a nanolm run: nothing is saved) or when the run's folder cannot be written (a shared,
    read-only run: a warning says so, and the command's output stands)."""
    if run_dir is None:
        return None
    try:
        return save_result(kind.path(run_dir, f"{name}.json", create=True), result)
    except UserError as e:
        warn(f"the result was not saved in the run: {e}")
        return None


def file_name(text: str, default: str = "result") -> str:
    """text as a file name's stem: letters, digits, '-', '_' and '.' kept, anything else '_' ("my data" -> "my_data")."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text).strip(".") or default


def report_option(f):
    """--report: once the command's result is saved, write its run's page (RUN/report.html, nanolm report RUN).
    The command gets `report: bool`; it calls check_report(report, run_dir) before its work and
    write_run_report(run_dir) after its result is saved, when report is true."""
    return click.option(
        "--report", "report", is_flag=True, help="Then write the run's page, RUN/report.html (as nanolm report RUN does)."
    )(f)


def check_report(
    report: bool, run_dir: str | Path | None, why_none: str = "the model is not a nanolm run: leave out --report"
) -> None:
    """Before the work: --report needs a nanolm run whose folder can be written (a UserError otherwise; why_none
    says why there is no run, and what to do)."""
    if not report:
        return
    if run_dir is None:
        raise UserError(f"--report writes a nanolm run's page (RUN/report.html), but {why_none}")
    check_writable_file(Path(run_dir) / "report.html", "--report", "report.html")


def write_run_report(run_dir: str | Path) -> Path:
    """Write the run's page (RUN/report.html) and name it on stderr (stdout stays the command's result); each
    artifact the page could not read is a warning. nanolm.report is imported here, not at start-up."""
    from ..report.build import write_report

    page = write_report(run_dir, on_problem=warn)
    click.echo(f"report written to {page}", err=True)
    return page


# ---- stderr: spinners and progress ------------------------------------------------------------


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)  # stderr, and only drawn on a terminal: --json output and logs stay clean


def working(what: str):
    """A spinner on stderr while `what` runs."""
    stderr = _stderr_console()
    return stderr.status(what) if stderr.is_terminal else contextlib.nullcontext()


@contextlib.contextmanager
def progress_bar(what: str) -> Iterator[Callable[[int, int | None], None]]:
    """A transient progress bar on stderr; yields advance(done, total)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    stderr = _stderr_console()
    with Progress(
        TextColumn(what),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
        disable=not stderr.is_terminal,
    ) as bar:
        task = bar.add_task(what, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)
