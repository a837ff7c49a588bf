"""`nanolm lens` and `nanolm probe` as a user types them: on a nanolm run and on a Hugging Face
model saved in a local folder (built here from a random config: nothing is downloaded)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from test_cli import nanolm as nanolm_subprocess

WORDS = [
    "<unk>",
    "<bos>",
    "two",
    "plus",
    "equals",
    "four",
    "the",
    "dog",
    "ran",
    "runs",
    "and",
    "then",
    "it",
    ".",
    "cat",
    "bird",
    "fish",
    "man",
]


@pytest.fixture
def nanolm(cli):
    return cli


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    """A random-init GPT-2 with a word-level tokenizer, saved like a downloaded model."""
    from conftest import word_level_gpt2

    folder = tmp_path_factory.mktemp("hf") / "tiny-gpt2"
    model, tok = word_level_gpt2(WORDS)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_lens_on_a_local_hugging_face_model(hf_folder, tmp_path):
    out = nanolm_subprocess("lens", str(hf_folder), "--prompt", "two plus two equals", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["tokens"] == ["<bos>", "two", "plus", "two", "equals"]
    assert result["layers"] == ["embed", "0", "1"] and result["positions"] == [4]  # the last position by default
    assert all(row[-1]["final_token_rank"] >= 1 for row in result["cells"])
    assert result["cells"][-1][-1]["final_token_rank"] == 1
    # a Hugging Face folder is not a run: no figure unless --plot names one, and nothing in the current folder
    assert result["plot"] is None and not any(tmp_path.iterdir())


def test_a_hugging_face_folder_gets_a_figure_only_where_plot_says(hf_folder, tmp_path, nanolm):
    out = nanolm("lens", str(hf_folder), "-p", "two plus two", cwd=tmp_path)
    assert out.returncode == 0 and "no heatmap written" in out.stdout and "--plot" in out.stdout
    assert not any(tmp_path.iterdir()) and not any(p.name.endswith(".png") for p in hf_folder.rglob("*"))
    out = nanolm("lens", str(hf_folder), "-p", "two plus two", "--plot", "mine.png", cwd=tmp_path)
    assert out.returncode == 0 and "heatmap written to mine.png" in out.stdout and "replaced" not in out.stderr
    assert (tmp_path / "mine.png").read_bytes()[:4] == b"\x89PNG"


def test_unknown_words_of_a_hugging_face_tokenizer_are_noted(hf_folder, tmp_path, nanolm):
    out = nanolm("lens", str(hf_folder), "-p", "two plus zorp equals", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["notes"] == ["not in the vocabulary, read as <unk>: zorp"]


def copy_run(run: Path, to: Path) -> Path:
    """A copy of a run that a test may write into (the shared fixture's folder stays as it was)."""
    return Path(shutil.copytree(run, to / run.name))


def test_lens_show_train_eval_and_probe_on_a_nanolm_run(trained_run, tmp_path, nanolm):
    work = tmp_path / "work"
    work.mkdir()
    run_dir = copy_run(trained_run, tmp_path)
    run = str(run_dir)
    shown = nanolm("lens", run, "-p", "two plus two equals", "--positions", "0,-1", cwd=work)
    assert shown.returncode == 0, shown.stderr
    flat = " ".join(shown.stdout.split())
    assert "at position 4 ('equals')" in flat and "at position 0 ('<eos>')" in flat, shown.stdout
    # the figure goes into the run's folder, never into the current one
    assert f"heatmap written to {run_dir / 'figures' / 'lens.png'}" in shown.stdout
    assert (run_dir / "figures" / "lens.png").is_file() and not any(work.iterdir())
    raw = nanolm("lens", run, "-p", "two plus two equals", "--no-final-norm", "--json", cwd=tmp_path)
    assert "without the final norm" in json.loads(raw.stdout)["notes"][0]
    unknown = nanolm("lens", run, "-p", "two plus zorp", "--json", cwd=tmp_path)
    assert json.loads(unknown.stdout)["notes"] == ["not in the vocabulary, read as <unk>: zorp"]

    trained = nanolm("lens", "train", run, "--steps", "20", "--json", cwd=work)
    assert trained.returncode == 0, trained.stderr
    lens_dir = run_dir / "tuned_lens"
    assert json.loads(trained.stdout)["steps"] == 20 and (lens_dir / "translators.safetensors").is_file()
    # progress on stderr while it runs (off a terminal: a line per 10% of the steps, with the time left), then a last line
    progress = [line for line in trained.stderr.splitlines() if line.startswith("tuned lens: step")]
    assert len(progress) == 10 and "step 2/20" in progress[0] and "left" in progress[0], trained.stderr
    assert "tuned lens: 20 steps in" in trained.stderr.splitlines()[-1]
    ev = nanolm("lens", "eval", run, "--batches", "2", cwd=work)
    assert ev.returncode == 0, ev.stderr
    assert "logit lens" in ev.stdout and "tuned lens" in ev.stdout and (run_dir / "figures" / "lens-eval.png").is_file()
    last_row = header_and_rows(ev.stdout)[1][-1]
    assert last_row[0] == "1" and last_row[-1] == "-"  # 0/0 is no ratio
    assert json.loads(nanolm("lens", "eval", run, "--batches", "1", "--json", cwd=work).stdout)["ratios"][-1] is None
    tuned = nanolm("lens", run, "-p", "the dog", "--tuned", "--json", cwd=work)
    assert json.loads(tuned.stdout)["tuned"] is True

    probed = nanolm("probe", run, "--feature", "sentiment", "--n", "200", "--intervene", "--erase-at", "all", "--json", cwd=work)
    assert probed.returncode == 0, probed.stderr
    result = json.loads(probed.stdout)
    assert [p["layer"] for p in result["layers"]] == ["embed", "0", "1"]
    iv = result["intervention"]
    assert iv["layer"] == result["best_layer"] and len(iv["random_deltas"]) == 29 and iv["min_effect"] == 0.05
    assert iv["p_value"] == pytest.approx((1 + sum(abs(d) >= abs(iv["delta"]) for d in iv["random_deltas"])) / 30)
    assert result["plot"] == str(run_dir / "figures" / "probe-sentiment.png") and Path(result["plot"]).is_file()
    table = nanolm("probe", run, "--feature", "tense", "--n", "40", "--layers", "1", cwd=work)
    assert "selectivity" in table.stdout and "n_train = 30 ≤ dimension 64" in table.stderr
    assert not any(work.iterdir())  # nothing was written into the current folder


def test_an_existing_figure_is_replaced_only_with_a_line_saying_so(trained_run, tmp_path, nanolm):
    run_dir = copy_run(trained_run, tmp_path)
    first = nanolm("lens", str(run_dir), "-p", "the dog", cwd=tmp_path)
    assert first.returncode == 0 and "replaced" not in first.stderr, first.stderr
    again = nanolm("lens", str(run_dir), "-p", "the dog ran", cwd=tmp_path)
    assert again.returncode == 0 and f"replaced {run_dir / 'figures' / 'lens.png'}" in again.stderr
    mine = tmp_path / "mine.png"
    mine.write_bytes(b"my own figure")
    failed = nanolm("lens", str(run_dir), "-p", "", "--plot", str(mine), cwd=tmp_path)
    assert failed.returncode == 2 and mine.read_bytes() == b"my own figure"  # a failed command loses nothing
    out = nanolm("lens", str(run_dir), "-p", "the dog", "--plot", str(mine), cwd=tmp_path)
    assert out.returncode == 0 and f"replaced {mine}" in out.stderr and mine.read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in (run_dir / "figures").iterdir()) == ["lens.png"]


def header_and_rows(stdout: str) -> tuple[list[str], list[list[str]]]:
    """Each table's header (the line above its rule under the header, spaces collapsed) and its body lines (up to
    the blank line after them), split at runs of spaces."""
    lines = stdout.splitlines()
    headers, rows = [], []
    for i, line in enumerate(lines):
        if line.strip() and set(line.strip()) == {"─"}:
            headers.append(" ".join(lines[i - 1].split()))
            for body in lines[i + 1 :]:
                if not body.strip():
                    break
                rows.append(body.split())
    return headers, rows


def test_tables_fit_80_columns_and_the_lens_prints_one_table(trained_run, tmp_path, nanolm, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    run = str(trained_run)
    out = nanolm("lens", run, "-p", "two plus two equals", "--plot", str(tmp_path / "l.png"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert max(map(len, out.stdout.splitlines())) <= 80 and "…" not in out.stdout, out.stdout
    headers, rows = header_and_rows(out.stdout)
    assert headers == ["layer top 3, with p p(out) rank KL (nats) H (nats)"], out.stdout  # one table, header one line
    assert [r[0] for r in rows] == ["embed", "0", "1"], out.stdout  # one line per layer: no cell folded
    assert len(out.stdout.splitlines()) <= 14, out.stdout

    out = nanolm(
        "probe",
        run,
        "--feature",
        "tense",
        "--n",
        "80",
        "--intervene",
        "--method",
        "projection",
        "--plot",
        str(tmp_path / "p.png"),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert max(map(len, out.stdout.splitlines())) <= 80 and "…" not in out.stdout, out.stdout
    headers, rows = header_and_rows(out.stdout)
    assert headers == ["layer acc 95% CI majority control sel. train n (examples)"], out.stdout
    assert [r[0] for r in rows] == ["embed", "0", "1"], out.stdout
    # the intervention states its draws, its p-value and the effect-size floor
    assert "29 random edits" in out.stdout and "p = " in out.stdout and "floor 0.05 nats" in out.stdout, out.stdout


def test_a_read_only_run_is_refused_before_any_work(trained_run, tmp_path, nanolm, monkeypatch):
    run_dir = copy_run(trained_run, tmp_path)
    before = sorted(p.name for p in run_dir.iterdir())
    os.chmod(run_dir, 0o555)
    # root writes anywhere: make os.access honour the mode bits, as it does for every other user
    monkeypatch.setattr(os, "access", lambda p, mode: bool(os.stat(p).st_mode & 0o200) if mode == os.W_OK else True)
    try:
        trained = nanolm("lens", "train", str(run_dir), "--steps", "200", cwd=tmp_path)
        shown = nanolm("lens", str(run_dir), "-p", "the dog", cwd=tmp_path)
    finally:
        os.chmod(run_dir, 0o755)
    assert trained.returncode == 2 and f"cannot create {run_dir / 'tuned_lens'}" in trained.stderr, trained.stderr
    assert len(trained.stderr.strip().splitlines()) == 1  # refused before the first step: no progress line
    assert shown.returncode == 2 and "figures" in shown.stderr and "--plot" in shown.stderr, shown.stderr
    assert len(shown.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in run_dir.iterdir()) == before


@pytest.mark.parametrize(
    "args,message",
    [
        (["lens", "{run}", "-p", " ".join(["the"] * 40)], "longer than the model's context of 32"),
        (["probe", "{run}", "--feature", "mood"], "unknown feature 'mood'; built-in features: tense, sentiment"),
        (["probe", "{run}", "--feature", "tense", "--layers", "7"], "layer 7 is out of range: this model has layers 0..1"),
        (["probe", "{run}", "--feature", "{one_class}"], "single class"),
        (["probe", "{run}", "--feature", "{no_label}"], "no 'label' column"),
        (["lens", "{not_lm}", "-p", "x"], "not a causal LM"),
        (["lens", "train", "{run}", "--steps", "0"], "--steps must be > 0"),
        (["lens", "eval", "{run}", "--lens-dir", "{empty}"], "no tuned lens in"),
        (["probe", "{run}", "--feature", "{jsonl_missing}"], "bad.jsonl:2: no 'label' value"),
        (["probe", "{run}", "--feature", "{jsonl_list}"], "list.jsonl:1: not a JSON object"),
        (["probe", "{run}", "--feature", "{json_array}"], "give JSON Lines"),
        (["probe", "{run}", "--feature", "{latin1}"], "not UTF-8"),
        (["probe", "{run}", "--feature", "{short_row}"], "short.csv:3: no 'label' value"),
        (["probe", "{run}", "--feature", "tense", "--plot", "{empty}"], "--plot"),
        (["probe", "{run}", "--feature", "tense", "--plot", "probe.jpg"], "give a name ending in .png"),
        (["lens", "{run}", "-p", "the dog", "--plot", "{nodir}"], "does not exist"),
        (["lens", "{run}", "-p", ""], "the prompt is empty"),
        (["lens", "train", "{run}", "--out", "{a_file}"], "is a file; the tuned lens is a folder"),
        (["lens", "train", "{run}", "--lr", "-1"], "--lr must be a positive number"),
        (["probe", "{run}", "--feature", "tense", "--at", "1"], "add --intervene"),
        (["probe", "{run}", "--feature", "sentiment", "--intervene"], "Use --erase-at all"),
        (["probe", "{run}", "--feature", "{too_long}"], "text #1 ("),
        (
            ["lens", "{run}", "-p", "the dog", "--tuned", "--lens-dir", "{cut_weights}"],
            "translators.safetensors cannot be read as safetensors",
        ),
        (["lens", "eval", "{run}", "--lens-dir", "{cut_meta}"], "tuned_lens.json is not valid JSON"),
        (["probe", "{run}", "--feature", "tense", "--intervene", "--random-edits", "0"], "--random-edits must be at least 1"),
        (["probe", "{run}", "--feature", "tense", "--intervene", "--min-effect", "-1"], "--min-effect must be a number"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(trained_run, tmp_path, args, message, nanolm):
    (tmp_path / "one.csv").write_text("text,label\nthe dog ran,past\nthe dog walked,past\n")
    (tmp_path / "nolabel.csv").write_text("text,tense\nthe dog ran,past\n")
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.jsonl").write_text('{"text": "the dog ran", "label": "past"}\n{"text": "the dog runs"}\n')
    (tmp_path / "list.jsonl").write_text("[1, 2]\n")
    (tmp_path / "array.json").write_text('[{"text": "the dog ran", "label": "past"}]')
    (tmp_path / "latin1.csv").write_bytes("text,label\nthe caf\xe9 ran,past\n".encode("latin-1"))
    (tmp_path / "short.csv").write_text("text,label\nthe dog ran,past\nthe dog runs\n")
    (tmp_path / "long.csv").write_text("text,label\n" + " ".join(["the"] * 40) + ",past\nthe dog,present\n")
    (tmp_path / "a_file").write_text("not a folder")
    from nanolm.interp.tuned_lens import TunedLens

    for name, file, keep in (("cut_weights", "translators.safetensors", 200), ("cut_meta", "tuned_lens.json", 20)):
        TunedLens(64, 2).save(tmp_path / name, {"model": "trained"})  # the shape of trained_run's model
        (tmp_path / name / file).write_bytes((tmp_path / name / file).read_bytes()[:keep])  # cut short
    fill = {
        "run": str(trained_run),
        "one_class": str(tmp_path / "one.csv"),
        "no_label": str(tmp_path / "nolabel.csv"),
        "not_lm": str(tmp_path / "bert"),
        "empty": str(tmp_path / "empty"),
        "jsonl_missing": str(tmp_path / "bad.jsonl"),
        "jsonl_list": str(tmp_path / "list.jsonl"),
        "json_array": str(tmp_path / "array.json"),
        "latin1": str(tmp_path / "latin1.csv"),
        "short_row": str(tmp_path / "short.csv"),
        "nodir": str(tmp_path / "nodir" / "lens.png"),
        "a_file": str(tmp_path / "a_file"),
        "too_long": str(tmp_path / "long.csv"),
        "cut_weights": str(tmp_path / "cut_weights"),
        "cut_meta": str(tmp_path / "cut_meta"),
    }
    out = nanolm(*[a.format(**fill) for a in args], cwd=tmp_path)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert message in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    if "{cut_weights}" in args or "{cut_meta}" in args:  # the damaged file named, and the fix
        assert str(tmp_path / "cut_") in out.stderr and "nanolm lens train RUN --out" in out.stderr


def test_probe_and_intervention_on_a_local_hugging_face_model(hf_folder, tmp_path, nanolm):
    rows = [
        (f"the {who} {verb} and then it", label, verb, other)
        for who in ("dog", "cat", "bird", "fish", "man")
        for verb, other, label in (("ran", "runs", "past"), ("runs", "ran", "present"))
    ]
    lines = ["text,label,target,contrast"] + [",".join(r) for r in rows * 4]
    (tmp_path / "tense.csv").write_text("\n".join(lines) + "\n")
    out = nanolm("probe", str(hf_folder), "--feature", str(tmp_path / "tense.csv"), "--intervene", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert [p["layer"] for p in result["layers"]] == ["embed", "0", "1"]
    # the probe reads the last token, "it" in every text: its embedding alone cannot carry the label,
    # so the probe predicts one class for all (accuracy = that class's held-out share)
    embed = result["layers"][0]
    assert embed["accuracy"] == pytest.approx(embed["majority"]) or embed["accuracy"] == pytest.approx(1 - embed["majority"])
    assert result["intervention"]["preference_base"] is not None and result["plot"] is None
    assert not (tmp_path / "probe.png").exists()  # not a run: no figure unless --plot names one


def test_a_hugging_face_folder_without_a_fitting_tokenizer_is_one_line(hf_folder, tmp_path, nanolm):
    import shutil

    bare = tmp_path / "bare"  # weights and config, no tokenizer files: AutoTokenizer would build an empty one
    bare.mkdir()
    for f in hf_folder.iterdir():
        if f.name in ("config.json", "model.safetensors", "generation_config.json"):
            shutil.copy(f, bare / f.name)
    out = nanolm("lens", str(bare), "-p", "two plus two", cwd=tmp_path)
    assert out.returncode == 2 and "has no tokenizer" in out.stderr and len(out.stderr.strip().splitlines()) == 1

    big = tmp_path / "big"  # a tokenizer with more tokens than the model embeds
    shutil.copytree(hf_folder, big)
    config = json.loads((big / "config.json").read_text())
    transformers = pytest.importorskip("transformers")
    small = transformers.GPT2LMHeadModel(transformers.GPT2Config(**{**config, "vocab_size": len(WORDS) - 4}))
    small.save_pretrained(big)
    out = nanolm("lens", str(big), "-p", "two plus two", cwd=tmp_path)
    assert out.returncode == 2 and f"the tokenizer has {len(WORDS)} tokens but the model embeds only" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_training_progress_on_a_terminal_is_a_bar_with_the_time_left_then_a_last_line():
    import io

    from rich.console import Console

    from nanolm.cli.interp import step_progress

    buf = io.StringIO()
    with step_progress("tuned lens", 5, stderr=Console(file=buf, force_terminal=True, width=100)) as on_step:
        for step in range(1, 6):
            on_step(step, 0.5 / step)
    shown = buf.getvalue()
    assert "5/5" in shown and "spent," in shown and "left" in shown and "loss 0.1000" in shown
    assert shown.rsplit("\x1b[2K", 1)[-1].startswith("tuned lens: 5 steps in")  # what stays once the bar is cleared


def test_the_probe_commands_defaults_are_the_librarys():
    from nanolm.cli.interp import probe
    from nanolm.interp.interventions import MIN_EFFECT_NATS, N_RANDOM

    defaults = {p.name: p.default for p in probe.params}
    assert (defaults["n_random"], defaults["min_effect"]) == (N_RANDOM, MIN_EFFECT_NATS)
