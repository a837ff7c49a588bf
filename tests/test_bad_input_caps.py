"""No silent cap (hostile input, class 6): when the data or corpus holds fewer tokens, texts or questions than a
count asked for, the command says so in one warning line (asked, what there was, what it used, how to get more),
records it where the result is kept, and says nothing when the count was met or left to its default."""

from __future__ import annotations

import json
import shutil

import pytest

from test_cli import nanolm as nanolm_subprocess

WARNING = "nanolm: warning: "
LINES = [f"line {i} : the quick brown fox jumps over the lazy dog number {i} ." for i in range(400)]


@pytest.fixture(scope="module")
def workdir(trained_run, tmp_path_factory):
    """(cwd holding runs/<the trained run> and small.txt, the run folder, the tokens small.txt's training lines give)."""
    from nanolm.interp.activations import as_token_ids
    from nanolm.interp.sae.pipeline import split_texts
    from nanolm.interp.view import load_view

    cwd = tmp_path_factory.mktemp("caps")
    folder = cwd / "runs" / trained_run.name
    shutil.copytree(trained_run, folder)
    (cwd / "small.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    train, _ = split_texts(LINES)
    available = sum(len(ids) for ids in as_token_ids(load_view(folder), train))  # every token the SAE reads
    return cwd, folder, available


def warnings_of(stderr: str) -> list[str]:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert all(line.startswith(WARNING) for line in lines), stderr
    assert "Traceback" not in stderr
    return lines


def sae_train(cli, workdir, tokens: int, out: str, *extra: str):
    cwd, folder, _ = workdir
    args = ["sae", "train", str(folder), "--layer", "0", "--data", "small.txt", "--batch-size", "64", "--expansion", "2"]
    return cli(*args, "--tokens", str(tokens), "--steps", "4", "--out", out, *extra, cwd=cwd)


@pytest.mark.parametrize("asked", [10**7, 10**8])  # far past what the file holds, up to the largest allowed
def test_sae_train_says_when_the_texts_hold_fewer_tokens_than_asked(cli, workdir, asked):
    cwd, _, available = workdir
    assert available < 10**5  # the planted shortfall
    out = sae_train(cli, workdir, asked, f"sae-{asked}", "--json")
    assert out.returncode == 0, out.stderr
    [line] = warnings_of(out.stderr)
    for words in (f"--tokens {asked:,} asked", "--data small.txt", f"{available:,} activation tokens", "--data"):
        assert words in line, (words, line)
    assert json.loads(out.stdout)["tokens_collected"] == available
    cfg = json.loads((cwd / f"sae-{asked}" / "cfg.json").read_text())
    assert (cfg["nanolm"]["extra"]["tokens_asked"], cfg["nanolm"]["extra"]["tokens_collected"]) == (asked, available)


def test_sae_train_is_silent_when_the_tokens_asked_are_there(cli, workdir):
    cwd, _, available = workdir
    for tokens in (available, available - 1, 64):  # all there, one short of all, one batch
        out = sae_train(cli, workdir, tokens, f"sae-exact-{tokens}")
        assert out.returncode == 0, out.stderr
        assert warnings_of(out.stderr) == []
        cfg = json.loads((cwd / f"sae-exact-{tokens}" / "cfg.json").read_text())
        assert cfg["nanolm"]["extra"]["tokens_asked"] == cfg["nanolm"]["extra"]["tokens_collected"] == tokens
    short = sae_train(cli, workdir, available + 1, "sae-one-more")  # one past what there is
    assert f"{available + 1:,} asked" in warnings_of(short.stderr)[0]


def test_the_real_command_says_it_in_one_line(workdir):
    cwd, folder, available = workdir
    out = nanolm_subprocess(
        "sae", "train", str(folder), "--layer", "0", "--data", "small.txt", "--batch-size", "64", "--expansion", "2",
        "--tokens", "5000000", "--steps", "2", "--out", "sae-subprocess", cwd=cwd,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    [line] = warnings_of(out.stderr)
    assert f"has {available:,} activation tokens" in line


def test_sae_eval_and_features_say_when_there_are_fewer_held_out_texts(cli, workdir):
    from nanolm.interp.sae.pipeline import split_texts

    cwd, folder, _ = workdir
    trained = sae_train(cli, workdir, 64, "sae-for-eval")
    assert trained.returncode == 0, trained.stderr
    held = len(split_texts(LINES)[1])
    for command in (["eval"], ["features", "--count", "1"]):
        base = ["sae", *command[:1], "sae-for-eval", "--model", str(folder), "--data", "small.txt", *command[1:]]
        asked = cli(*base, "--texts", "100000", cwd=cwd)
        assert asked.returncode == 0, asked.stderr
        [line] = warnings_of(asked.stderr)
        assert "--texts 100,000 asked" in line and f"has {held:,} texts" in line, line
        assert warnings_of(cli(*base, "--texts", str(held), cwd=cwd).stderr) == []  # exactly what there is
        assert warnings_of(cli(*base, cwd=cwd).stderr) == []  # the default: up to 1,000, whatever there is


def test_sycophancy_says_when_the_file_holds_fewer_questions(cli, workdir):
    cwd, folder, _ = workdir
    row = {"question": "what is two plus three ?", "choices": ["five", "six", "four"], "correct": "A", "wrong_opinion": "C"}
    (cwd / "three.jsonl").write_text("\n".join(json.dumps(row) for _ in range(3)) + "\n")
    base = ["sycophancy", str(folder), "--data", "three.jsonl", "--no-knows", "--out", "records.jsonl"]
    for n in (4, 50):
        out = cli(*base, "--n", str(n), cwd=cwd)
        assert out.returncode == 0, out.stderr
        [line] = [w for w in warnings_of(out.stderr) if "--n" in w]
        assert f"--n {n:,} asked" in line and "has 3 scorable questions" in line, line
    for quiet in (["--n", "3"], []):  # exactly what there is; the default (up to 200)
        out = cli(*base, *quiet, cwd=cwd)
        assert not [w for w in warnings_of(out.stderr) if "asked" in w], out.stderr
