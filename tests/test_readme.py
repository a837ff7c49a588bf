"""The README and the documentation pages as a user reads them: every code block runs as written, every command
and option they show exists, every link the README makes into docs/ leads somewhere, the README's performance
figures are the Performance page's, and every measured figure comes back from the command beside it, read from
the page that states it.

The quick checks run in `make test`; running the blocks and re-measuring the figures takes minutes and is
`make readme-check` (part of `make test-slow`). The configuration reference is written from `TrainConfig` when the
site is built, so it cannot differ from the config (tests/test_docs.py)."""

from __future__ import annotations

import dataclasses
import re
import shlex
import unicodedata
from pathlib import Path

import click
import pytest

from nanolm.cli import app
from nanolm.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# Every page a user reads, by its path from the repository root: README.md first, then docs/*.md.
PAGES = {
    "README.md": (ROOT / "README.md").read_text(encoding="utf-8"),
    **{str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in sorted(DOCS.rglob("*.md"))},
}
README = PAGES["README.md"]
ALL = "\n\n".join(PAGES.values())


def flat(text: str) -> str:
    return " ".join(text.split())  # line breaks inside a sentence or a command are spaces


FLAT = flat(ALL)


def code_blocks(language: str, text: str = ALL) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_the_pages_are_read():
    """The checks below read every page: the documentation is where the figures moved."""
    assert {"docs/profiling.md", "docs/expressivity.md", "docs/lens-and-probes.md", "docs/performance.md"} <= set(PAGES)
    assert len(README.splitlines()) <= 250, "README.md is the short entry; the detail goes to a docs page"


def command_lines() -> list[list[str]]:
    """Each `nanolm ...` command the pages show, as argv: the lines of their bash blocks (comments and `&& ...` split
    off) and their inline `nanolm ...` code spans."""
    out = []
    for block in code_blocks("bash"):
        for line in block.splitlines():
            line = line.split("  #", 1)[0].strip()
            for part in line.split("&&"):
                words = shlex.split(part.strip())
                if words and words[0] == "nanolm":
                    out.append(words[1:])
    prose = re.sub(r"```.*?```", "", ALL, flags=re.S)
    for span in re.findall(r"`(nanolm [^`]+)`", prose):
        words = shlex.split(span.replace("\\|", " "))
        out.append(words[1:])
    return out


def placeholder(word: str) -> bool:
    """A word that stands for what the reader supplies: RUN, SAE, RUN_OR_PATH, COMMAND, KEY=VALUE, ..."""
    return bool(re.fullmatch(r"[A-Z][A-Z_]*(\.\.\.)?|\.\.\.|[A-Z_]+=[A-Z_]+", word))


def resolve(argv: list[str]) -> tuple[click.Command, list[str]]:
    """The (sub)command argv names and the rest of its words."""
    command: click.Command = app
    words = list(argv)
    while isinstance(command, click.Group) and words and words[0] in command.list_commands(None):
        command = command.get_command(None, words.pop(0))
    if isinstance(command, click.Group) and getattr(command, "default_command", None) and words:
        # `nanolm lens RUN ...` means `lens show RUN`: then the word must be a run or model the pages make.
        made = set(re.findall(r"--name (\S+)", FLAT)) | set(re.findall(r"tiny_hf_model\.py (\S+)", FLAT))
        assert words[0] in made or placeholder(words[0]), (
            f"nanolm {' '.join(argv)}: {words[0]!r} is neither a command of {command.name} nor a run the pages "
            f"make ({', '.join(sorted(made))})"
        )
        command = command.get_command(None, command.default_command)
    assert command is not app or words[:1] == ["--help"] or (words and placeholder(words[0])), (
        f"nanolm {' '.join(argv)}: no such command"
    )
    if command.name == "profile" and words[:1] in (["compare"], ["analyze"]):  # `profile` hands these on
        from nanolm.cli.profile import profile_analyze, profile_compare

        command, words = {"compare": profile_compare, "analyze": profile_analyze}[words[0]], words[1:]
    return command, words


def test_every_command_and_option_shown_exists():
    lines = command_lines()
    assert len(lines) > 100
    keys = {f.name for f in dataclasses.fields(TrainConfig)}
    for argv in lines:
        command, words = resolve(argv)
        if "--" in words:  # what follows is someone else's command line
            words = words[: words.index("--")]
        known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)} | {"-h", "--help"}
        for i, word in enumerate(words[:-1]):
            if word == "--set" and not placeholder(words[i + 1]):  # the key must be a config key
                assert words[i + 1].split("=", 1)[0] in keys, argv
        for word in words:
            word = word.lstrip("[")  # `[--json]`: an optional option, as usage lines write it
            if word.startswith("-") and not re.fullmatch(r"-\d.*", word):
                assert word.split("=", 1)[0].rstrip("]") in known, (
                    f"nanolm {' '.join(argv)}: {word} is not an option of {command.name}"
                )


def test_an_unknown_option_would_be_caught():
    with pytest.raises(AssertionError, match="--no-such-option is not an option of train"):
        for argv in [["train", "--no-such-option"]]:
            command, words = resolve(argv)
            known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
            for word in words:
                assert word in known, f"nanolm {' '.join(argv)}: {word} is not an option of {command.name}"
    with pytest.raises(AssertionError, match="no such command"):
        resolve(["no-such-command"])


def slug(heading: str) -> str:
    """A heading's anchor as MkDocs (Python-Markdown's toc) and GitHub both write it for the headings used here."""
    text = re.sub(r"[`*]", "", heading).strip()
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def test_the_readme_links_lead_somewhere():
    """Each README link to a file names one that exists; one to a heading of a docs page names a heading there (the
    site's build checks the same links on its home page, which is the README)."""
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    assert len(links) > 25
    for link in links:
        if re.match(r"https?://", link):
            continue
        path, _, anchor = link.partition("#")
        assert (ROOT / path).is_file(), f"README links to {path}, which does not exist"
        if anchor:
            headings = re.findall(r"^#{1,6} (.+)$", (ROOT / path).read_text(encoding="utf-8"), flags=re.M)
            assert anchor in {slug(h) for h in headings}, f"README links to {link}: no such heading in {path}"


def test_the_readme_performance_table_is_the_performance_pages():
    """Each figure of the README's performance table is stated on the Performance page, where its setup is."""
    table = README[README.index("| what | against | measured |") :]
    table = table[: table.index("\n\n")]
    performance = flat(PAGES["docs/performance.md"])
    figures = re.findall(r"\*\*([^*]+)\*\*", table)
    assert len(figures) >= 12
    for figure_ in figures:
        assert figure_ in performance, f"the README's performance figure {figure_} is not on docs/performance.md"


def test_example_files_the_pages_name_exist_and_load():
    from nanolm.config import make_config
    from nanolm.repro.experiment import load_experiment

    for name in re.findall(r"examples/[\w./-]+\.(?:toml|py|sbatch)", ALL):
        assert (ROOT / name).is_file(), name
    assert make_config(ROOT / "examples" / "config.toml").n_layer == 2
    assert load_experiment(ROOT / "examples" / "experiment.toml").idea == "a higher learning rate"


@pytest.mark.slow
@pytest.mark.readme
def test_the_python_blocks_run_as_written(tmp_path):
    import subprocess
    import sys

    blocks = [(page, i, block) for page, text in PAGES.items() for i, block in enumerate(code_blocks("python", text))]
    assert len(blocks) >= 2
    for page, i, block in blocks:
        script = tmp_path / f"block{len(list(tmp_path.iterdir()))}.py"
        script.write_text(block)
        out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, f"{page}, python block {i}:\n{block}\n{out.stderr[-2000:]}"


# ---- figures: each measured number on a page, re-measured by the command shown beside it ---------------------


def nanolm_json(argv: list[str], cwd: Path, timeout: int = 900) -> object:
    """Run `nanolm ARGV --json` as a user would (a real process) and return the parsed output."""
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "nanolm", *argv, "--json"], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert out.returncode == 0, f"nanolm {' '.join(argv)}: {out.stderr[-2000:]}"
    return json.loads(out.stdout)


def page_command(page: str, pattern: str) -> list[str]:
    """The page's own command line that matches `pattern` (a regex), as argv without the leading nanolm."""
    match = re.search(pattern, flat(PAGES[page]))
    assert match, f"{page} no longer shows a command matching {pattern!r}"
    return shlex.split(match.group(0).split("#", 1)[0].strip())[1:]


def figure(page: str, pattern: str) -> tuple[str, ...]:
    """The groups of the page's text matching `pattern`: the figures as written."""
    match = re.search(pattern, flat(PAGES[page]))
    assert match, f"{page} no longer states a figure matching {pattern!r}"
    return match.groups()


def table_after(page: str, header: str) -> list[str]:
    """The lines of the page's Markdown table that starts with `header`."""
    text = PAGES[page]
    assert header in text, f"{page} no longer has the table {header!r}"
    lines = text[text.index(header) :].splitlines()
    return [line for line in lines[: next((i for i, line in enumerate(lines) if not line.startswith("|")), len(lines))]]


def test_the_mfu_example_is_the_reference_documents(tmp_path):
    argv = page_command("docs/profiling.md", r"nanolm mfu --params 1\.24e8 --tokens-per-s 2e5 --device h100")
    (stated,) = figure("docs/profiling.md", r"--device h100 +# → (\d+\.\d)%")
    assert round(100 * nanolm_json(argv, tmp_path)["mfu"], 1) == float(stated) == 15.0


def test_the_minimize_example(tmp_path):
    build = page_command("docs/expressivity.md", r"nanolm dfa build divisible --k 6 -o d6\.json")
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "nanolm", *build], cwd=tmp_path, check=True, capture_output=True)
    before, after = figure("docs/expressivity.md", r"Hopcroft: (\d+) states → (\d+)")
    got = nanolm_json(page_command("docs/expressivity.md", r"nanolm dfa minimize d6\.json"), tmp_path)
    assert (got["states_before"], got["states_after"]) == (int(before), int(after))


def test_the_precision_table(tmp_path):
    argv = page_command("docs/expressivity.md", r"nanolm dyck precision --k 2 -h 1 -h 32 -h 256")
    rows = [line.strip("|").split("|") for line in table_after("docs/expressivity.md", "| precision | values per unit V |")[2:]]
    assert len(rows) == 3
    got = nanolm_json(argv, tmp_path)["rows"]
    for cells in rows:
        name, depths = cells[0].strip(), [int(c.replace(",", "")) for c in cells[2:5]]
        measured = [r["max_depth"] for r in got if r["precision"] == name]
        assert measured == depths, (name, measured, depths)


def tour(page: str, heading: str) -> list[str]:
    """The `nanolm` lines of the first bash block under the page's heading."""
    text = PAGES[page]
    assert heading in text, f"{page} no longer has its tour ({heading!r})"
    (block,) = code_blocks("bash", text[text.index(heading) :])[:1]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.startswith("nanolm ")]


def test_the_getting_started_tour_holds_the_readmes():
    """The slow test runs Getting started's tour, so every line of the README's must be in it, in the same order."""
    readme, full = tour("README.md", "## A short tour"), tour("docs/getting-started.md", "## A tour")
    assert len(readme) >= 8
    assert [line for line in full if line in readme] == readme


@pytest.mark.slow
@pytest.mark.readme
def test_the_tour_runs_as_written(tmp_path):
    """Getting started's tour (the README's and more), command by command, in a folder holding what it names."""
    import shutil
    import subprocess
    import sys

    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    for line in tour("docs/getting-started.md", "## A tour"):
        argv = shlex.split(line)[1:]
        out = subprocess.run(
            [sys.executable, "-m", "nanolm", *argv, *(["-q"] if argv[0] == "train" else [])],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert out.returncode == 0, f"{line}\n{out.stderr[-2000:]}"
        assert "Traceback" not in out.stderr, line


def rate_spread(n: int) -> float:
    """How far a rate over n coin-like trials moves between machines: 2.5 binomial standard errors at p = 1/2
    (a rate over 100 items: ±0.125), the tolerance for a figure the page gives as a range over the machines seen."""
    return 2.5 * (0.25 / n) ** 0.5


@pytest.mark.slow
@pytest.mark.readme
def test_the_tense_probe_paragraph(tmp_path):
    """The tense96 paragraph: its training command and its probe, re-run; every figure within tolerance."""
    page = "docs/lens-and-probes.md"
    nanolm_json(page_command(page, r"nanolm train --set n_layer=3 [^`#]*--name tense96"), tmp_path)
    got = nanolm_json(page_command(page, r"nanolm probe tense96 --feature tense --intervene"), tmp_path)
    layers = {p["layer"]: p for p in got["layers"]}
    # The paragraph gives ranges: the same command trains a different model on another CPU generation.
    low, high, majority, c_low, c_high = figure(
        page,
        r"(\d\.\d+)–(\d\.\d+) held-out at layers 0–2 \(95% CIs about ±0\.08; "
        r"majority (\d\.\d+), control\s+(\d\.\d+)–(\d\.\d+)",
    )
    for layer in ("0", "1", "2"):
        assert float(low) - 0.03 <= layers[layer]["accuracy"] <= float(high) + 0.03, layers[layer]
        assert layers[layer]["majority"] == pytest.approx(float(majority), abs=0.02)
        # The control is a probe on random labels, so its held-out accuracy is chance over about 100 sentences: a
        # fifth machine type lands anywhere within its binomial spread, not within a fixed ±0.05 of the four seen.
        spread = rate_spread(layers[layer]["n_test"])
        assert float(c_low) - spread <= layers[layer]["control_accuracy"] <= float(c_high) + spread, layers[layer]
    (embed,) = figure(page, r"the embedding alone: (\d\.\d+)")
    assert layers["embed"]["accuracy"] == pytest.approx(float(embed), abs=0.05)
    iv = got["intervention"]
    selective = max(("0", "1", "2"), key=lambda k: layers[k]["selectivity"])
    assert iv["layer"] == selective  # "at the most selective layer"
    d_low, d_high = figure(page, r"raises the loss on the verb by (\d\.\d+)–(\d\.\d+) nats")
    assert float(d_low) - 0.03 <= iv["delta"] <= float(d_high) + 0.05
    b_low, b_high, a_low, a_high = figure(page, r"drops from (\d+)–(\d+)% of held-out sentences to (\d+)–(\d+)%")
    spread = 100 * rate_spread(iv["scored"])
    assert float(b_low) - spread <= 100 * iv["preference_base"] <= float(b_high) + spread, iv
    assert float(a_low) - spread <= 100 * iv["preference_erased"] <= float(a_high) + spread, iv
    assert iv["preference_erased"] < iv["preference_base"]
    (verdict,) = figure(page, r"verdict: ([a-z ]+)\)")
    assert iv["verdict"] == verdict


@pytest.mark.slow
@pytest.mark.readme
def test_the_dyck_table(tmp_path):
    """The depth-generalization table: mean accuracies per depth, model and measure, re-run."""
    argv = page_command("docs/expressivity.md", r"nanolm dyck experiment --k 2 --train-depth 4 --test-depth 8")
    got = nanolm_json([*argv, "--plot", str(tmp_path / "dyck.png")], tmp_path, timeout=1800)
    table = table_after("docs/expressivity.md", "| depth | mean len |")
    header = [c.strip() for c in table[0].strip("|").split("|")]
    summary = {(s["model"], s["depth"]): s for s in got["summary"]}
    assert len(table) == 10
    for line in table[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        depth = int(cells[0].rstrip(" *"))
        for column, cell in zip(header[2:], cells[2:]):
            model, measure = re.fullmatch(r"([\w-]+) \((\w+)\)", column).groups()
            stated = float(cell.split()[0])
            # The runs are seeded, yet a transformer's sequence accuracy moved by up to 0.1 between re-runs of
            # one code (one wrong position fails a whole string): the tolerance is the seeds' own spread.
            tolerance = 0.02 if measure == "position" else 0.12
            assert summary[(model, depth)][f"{measure}_mean"] == pytest.approx(stated, abs=tolerance), (model, depth)


@pytest.mark.slow
@pytest.mark.readme
def test_the_demo_row(tmp_path):
    """`nanolm demo`'s numbers in the Performance table (and the README's) and the arithmetic it learns."""
    got = nanolm_json(["demo"], tmp_path)
    val, entropy = figure("docs/performance.md", r"val loss (\d\.\d+) nats vs unigram entropy (\d\.\d+)")
    (readme_val,) = figure("README.md", r"val loss \*\*(\d\.\d+)\*\* nats")
    assert readme_val == val
    assert got["train"]["val_loss"] == pytest.approx(float(val), abs=0.05)
    assert got["train"]["unigram_entropy"] == pytest.approx(float(entropy), abs=0.01)
    right, facts = figure("docs/performance.md", r"answers (\d+) of the corpus's (\d+) arithmetic facts")
    assert got["arithmetic"]["facts"] == int(facts)
    assert got["arithmetic"]["right"] == pytest.approx(int(right), abs=20)
