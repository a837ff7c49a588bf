"""Numbers no command can use are refused before any work: nan, inf and -inf on every float option, list item and
config value; integers past 64 bits on every integer option and config key; and counts whose work could not finish
(best-of-n's n, tokens, steps, ...) past their largest value, named in the one error line.

The first half walks every click command of nanolm (the lazily loaded ones and those reached by hand, such as
`profile compare`), so a new float option without the Finite type, or an integer option without a largest value,
fails here. The second half runs the real CLI on bad numbers and checks that nothing on disk changed."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

import nanolm.cli
from bad_input import assert_user_error, in_process, run_of, snapshot
from nanolm.cli import app
from nanolm.cli.output import INT64_MAX, Count, Finite

# (command path, flag) of float options where infinity is meaningful and documented in the option's help: none. An
# option added here must say so in its help text and handle infinity itself.
INFINITY_ALLOWED: frozenset[tuple[str, str]] = frozenset()

NON_FINITE = ("nan", "inf", "-inf", "NaN", "Infinity")


# ---- walking the commands ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    """One parameter of one command, with a context to convert its values in."""

    path: str  # "nanolm feedback pairs", or "nanolm.cli.profile.profile_compare" for a command reached by hand
    command: click.Command
    param: click.Parameter

    @property
    def flag(self) -> str:
        return max(self.param.opts, key=len) if self.param.opts else str(self.param.name)

    @property
    def id(self) -> str:
        return f"{self.path} {self.flag}"

    def convert(self, value: str) -> object:
        ctx = click.Context(self.command, info_name=self.path)
        return self.param.type.convert(value, self.param, ctx)


def _walk(command: click.Command, path: str, ctx: click.Context) -> Iterator[tuple[str, click.Command]]:
    """command and, for a group, every subcommand under it, recursively (lazy groups load theirs here)."""
    yield path, command
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, f"{path} lists {name!r} but cannot load it"
            yield from _walk(sub, f"{path} {name}", click.Context(sub, parent=ctx, info_name=name))


def _commands_in_modules(known: list[click.Command]) -> Iterator[tuple[str, click.Command]]:
    """The commands of nanolm.cli's modules that no group reaches (profile compare and analyze are run by hand)."""
    for info in pkgutil.iter_modules(nanolm.cli.__path__):
        module = importlib.import_module(f"nanolm.cli.{info.name}")
        for name, obj in vars(module).items():
            if isinstance(obj, click.Command) and not any(obj is k for k in known):
                known.append(obj)
                yield f"nanolm.cli.{info.name}.{name}", obj


def all_commands() -> list[tuple[str, click.Command]]:
    """Every command of the CLI, once each."""
    found = list(_walk(app, "nanolm", click.Context(app, info_name="nanolm")))
    found += list(_commands_in_modules([c for _, c in found]))
    return found


def all_params() -> list[Found]:
    return [Found(path, command, param) for path, command in all_commands() for param in command.params]


COMMANDS = all_commands()
PARAMS = all_params()
FLOATS = [p for p in PARAMS if isinstance(p.param.type, click.types.FloatParamType)]
INTS = [p for p in PARAMS if isinstance(p.param.type, click.types.IntParamType)]


def test_the_walk_finds_every_command_and_their_numbers():
    paths = {path for path, _ in COMMANDS}
    assert len(COMMANDS) >= 50, sorted(paths)
    for expected in (
        "nanolm train",
        "nanolm feedback best-of-n",
        "nanolm sae sweep",
        "nanolm steer sweep",
        "nanolm dyck experiment",
        "nanolm.cli.profile.profile_analyze",
    ):
        assert expected in paths, expected
    assert len(FLOATS) >= 25, [p.id for p in FLOATS]
    assert len(INTS) >= 80, [p.id for p in INTS]


@pytest.mark.parametrize("found", FLOATS, ids=lambda f: f.id)
def test_every_float_option_refuses_nan_and_infinity(found: Found):
    if (found.path, found.flag) in INFINITY_ALLOWED:
        pytest.skip("infinity is documented as meaningful here")
    assert isinstance(found.param.type, Finite), f"{found.id}: give it type=finite(...) (nanolm.cli.output)"
    for value in NON_FINITE:
        with pytest.raises(click.BadParameter, match="not a finite number"):
            found.convert(value)


@pytest.mark.parametrize("found", INTS, ids=lambda f: f.id)
def test_every_integer_option_stops_at_64_bits(found: Found):
    assert isinstance(found.param.type, Count), f"{found.id}: give it type=count(...) or INTEGER (nanolm.cli.output)"
    for value in (str(2**63), str(-(2**63) - 1), "9" * 30):
        with pytest.raises(click.BadParameter, match="use at"):
            found.convert(value)
    assert found.param.type.max <= INT64_MAX


def _numbers(default: object) -> list[int | float]:
    """An option's default as a list of numbers (none when it has no default)."""
    values = default if isinstance(default, (list, tuple)) else [default]
    return [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]


@pytest.mark.parametrize("found", [p for p in FLOATS + INTS if _numbers(p.param.default)], ids=lambda f: f.id)
def test_every_default_is_within_its_own_bounds(found: Found):
    for default in _numbers(found.param.default):
        assert found.convert(str(default)) == default


def test_the_types_read_what_they_should():
    temperature = next(p for p in FLOATS if p.id == "nanolm feedback pairs --temperature")
    assert temperature.convert("0.7") == 0.7
    with pytest.raises(click.BadParameter, match="--temperature 1"):  # the fix: the option's default
        temperature.convert("inf")
    with pytest.raises(click.BadParameter, match="not in the range"):  # the range still holds
        temperature.convert("0")
    samples = next(p for p in INTS if p.id == "nanolm feedback pairs --samples")
    assert samples.convert("8") == 8
    with pytest.raises(click.BadParameter, match="use at most 256"):
        samples.convert("257")
    with pytest.raises(click.BadParameter, match="use at least 2"):
        samples.convert("1")
    with pytest.raises(click.BadParameter, match="not a valid integer"):
        samples.convert("abc")


# ---- the real CLI on bad numbers --------------------------------------------------------------------------


def tree(folder: Path) -> tuple[set[str], dict[str, str]]:
    """Every path under folder (an empty folder made counts) and every file's hash."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}, snapshot(folder)


TOML = {
    "big.toml": "steps = 99999999999999999999\n",
    "nan.toml": "lr = nan\n",
    "inf.toml": "[optim]\ngrad_clip = inf\n",
    "neg.toml": "seed = -99999999999999999999\n",
}

# (argv, with RUN for the tiny trained run; what the one error line names)
_CASES = [
    (["feedback", "pairs", "RUN", "--temperature", "nan"], ["--temperature", "not a finite number"]),
    (["feedback", "pairs", "RUN", "--n", "100000000"], ["--n", "use at most 100000"]),
    (["feedback", "best-of-n", "RUN", "--reward", "rm", "--n", "1,2,100000000"], ["--n 100000000", "use at most 4096"]),
    (["feedback", "best-of-n", "RUN", "--reward", "rm", "--n", "1,2,...,100000000"], ["--n", "use at most 4096"]),
    (["feedback", "best-of-n", "RUN", "--reward", "rm", "--seeds", "0,1,...,1000000000000"], ["--seeds", "at most"]),
    (["feedback", "best-of-n", "RUN", "--reward", "rm", "--n", "4096", "--prompts", "10000"], ["--n", "--prompts"]),
    (["feedback", "best-of-n", "RUN", "--reward", "rm", "--temperature", "inf"], ["--temperature"]),
    (["feedback", "reward-model", "labels.jsonl", "--base", "RUN", "--held-out", "nan"], ["--held-out"]),
    (["feedback", "reward-model", "labels.jsonl", "--base", "RUN", "--steps", "99999999999"], ["--steps", "at most"]),
    (["train", "--set", "lr=nan"], ["lr must be > 0 and finite, got nan", "--set lr="]),
    (["train", "--set", "steps=99999999999999999999"], ["steps", "64 bits", "--set steps=600"]),
    (["train", "--set", "seed=1e30"], ["seed", "64 bits"]),
    (["train", "--set", "warmup_steps=-inf"], ["warmup_steps"]),
    (["train", "--config", "big.toml"], ["big.toml", "steps", "64 bits"]),
    (["train", "--config", "nan.toml"], ["nan.toml", "lr", "finite"]),
    (["train", "--config", "inf.toml"], ["inf.toml", "grad_clip", "finite"]),
    (["train", "--config", "neg.toml"], ["neg.toml", "seed", "64 bits"]),
    (["train", "--seed", str(2**63)], ["--seed", "64 bits"]),
    (["train", "--nproc", "100000"], ["--nproc", "use at most"]),
    (["sample", "RUN", "--tokens", "100000000"], ["--tokens", "use at most 10000"]),
    (["sample", "RUN", "--temperature", "inf"], ["--temperature"]),
    (["steer", "sweep", "RUN", "--direction", "sentiment", "--alphas", "0.5,nan"], ["--alphas", "'nan' is not a finite number"]),
    (["steer", "sweep", "RUN", "--direction", "sentiment", "--max-kl", "inf"], ["--max-kl"]),
    (["steer", "RUN", "--direction", "sentiment", "--layer", "0", "--alpha", "-inf", "-p", "a"], ["--alpha"]),
    (["sycophancy", "RUN", "--steer-layer", "0", "--steer-alphas", "0.5,inf"], ["--steer-alphas"]),
    (["lens", "train", "RUN", "--lr", "nan"], ["--lr"]),
    (["probe", "RUN", "--feature", "tense", "--min-effect", "inf"], ["--min-effect"]),
    (["sae", "train", "RUN", "--layer", "0", "--tokens", "1000000000000"], ["--tokens", "use at most"]),
    (["sae", "sweep", "RUN", "--layer", "0", "--arch", "topk", "--k", "8,99999999999999999999"], ["--k", "at most"]),
    (["claims", "kv", "RUN", "--ranks", "4,99999999999999999999"], ["--ranks", "at most"]),
    (["profile", "--set", "lr=nan"], ["lr", "finite"]),
    (["profile", "--expect-mfu", "inf"], ["--expect-mfu"]),
    (["profile", "--wait", "5000"], ["--wait 5000", "at most 1000"]),
    (["profile", "analyze", "trace.json", "--matmul-flops", "nan"], ["--matmul-flops"]),
    (["mfu", "--params", "inf", "--tokens-per-s", "1", "--peak-tflops", "1"], ["--params"]),
    (["bisect", "--good", "a", "--bad", "b", "--threshold", "nan"], ["--threshold"]),
    (["bisect", "--good", "a", "--bad", "b", "--threshold", "1", "--set", "grad_clip=inf"], ["grad_clip", "finite"]),
    (["seeds", "--name", "g", "--executor", "debug", "--set", "lr=-inf"], ["lr", "finite"]),
    (["sweep", "lr", "--values", "1e-3,1e-2", "--executor", "debug", "--set", "beta1=nan"], ["beta1", "finite"]),
    (["seeds", "--name", "g", "--n", "100000"], ["--n", "use at most"]),
    (["sweep", "lr", "--values", "1e-3,inf"], ["--values"]),
    (["dyck", "generate", "--p-end", "nan"], ["--p-end"]),
    (["dyck", "experiment", "--steps", "1000000000"], ["--steps", "use at most"]),
    (["dfa", "check", "d.json", "--random", "10000", "--random-len", "1000000"], ["--random-len", "or less"]),
    (["problems", "check", "x", "--timeout", "inf"], ["--timeout"]),
]


CASES = [pytest.param(argv, names, id=" ".join(argv)) for argv, names in _CASES]


@pytest.mark.parametrize(("argv", "names"), CASES)
def test_a_bad_number_is_one_line_and_changes_nothing(argv: list[str], names: list[str], workdir: Path, capfd, monkeypatch):
    monkeypatch.chdir(workdir)
    for name, text in TOML.items():
        (workdir / name).write_text(text, encoding="utf-8")
    run = str(run_of(workdir, "words"))
    before = tree(workdir)
    code, err = in_process([run if a == "RUN" else a for a in argv], capfd)
    assert_user_error(code, err, *names)
    assert tree(workdir) == before  # no run folder, figure or trace folder made; no file changed
