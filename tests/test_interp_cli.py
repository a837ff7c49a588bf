"""`nanolm lens` and `nanolm probe` as a user types them: on a nanolm run and on a Hugging Face
model saved in a local folder (built here from a random config: nothing is downloaded)."""

from __future__ import annotations

import json

import pytest

from test_cli import nanolm as nanolm_subprocess

WORDS = ["<unk>", "<bos>", "two", "plus", "equals", "four", "the", "dog", "ran", "runs", "and", "then", "it", ".",
         "cat", "bird", "fish", "man"]


@pytest.fixture
def nanolm(cli):
    return cli


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    """A random-init GPT-2 with a word-level tokenizer, saved like a downloaded model."""
    transformers = pytest.importorskip("transformers", reason="the hf extra is not installed")
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    folder = tmp_path_factory.mktemp("hf") / "tiny-gpt2"
    core = Tokenizer(WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    core.pre_tokenizer = Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<bos>")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=len(WORDS), n_positions=16, n_embd=32, n_layer=2, n_head=2,
                                  bos_token_id=1, eos_token_id=1)
    transformers.GPT2LMHeadModel(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_lens_on_a_local_hugging_face_model(hf_folder, tmp_path):
    out = nanolm_subprocess("lens", str(hf_folder), "--prompt", "two plus two equals", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["tokens"] == ["<bos>", "two", "plus", "two", "equals"]
    assert result["layers"] == ["embed", "0", "1"]
    assert all(row[-1]["final_token_rank"] >= 1 for row in result["cells"])
    assert result["cells"][-1][-1]["final_token_rank"] == 1 and (tmp_path / "lens.png").is_file()


def test_unknown_words_of_a_hugging_face_tokenizer_are_noted(hf_folder, tmp_path, nanolm):
    out = nanolm("lens", str(hf_folder), "-p", "two plus zorp equals", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["notes"] == ["not in the vocabulary, read as <unk>: zorp"]


def test_lens_show_train_eval_and_probe_on_a_nanolm_run(trained_run, tmp_path, nanolm):
    run = str(trained_run)
    shown = nanolm("lens", run, "-p", "two plus two equals", "--positions", "last", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "logit lens at position 4 ('equals')" in shown.stdout and "KL(final‖layer)" in shown.stdout
    raw = nanolm("lens", run, "-p", "two plus two equals", "--no-final-norm", "--json", cwd=tmp_path)
    assert "without the final norm" in json.loads(raw.stdout)["notes"][0]
    unknown = nanolm("lens", run, "-p", "two plus zorp", "--json", cwd=tmp_path)
    assert json.loads(unknown.stdout)["notes"] == ["not in the vocabulary, read as <unk>: zorp"]

    lens_dir = tmp_path / "lens"
    trained = nanolm("lens", "train", run, "--steps", "20", "--out", str(lens_dir), "--json", cwd=tmp_path)
    assert trained.returncode == 0, trained.stderr
    assert json.loads(trained.stdout)["steps"] == 20 and (lens_dir / "translators.safetensors").is_file()
    ev = nanolm("lens", "eval", run, "--lens-dir", str(lens_dir), "--batches", "2", cwd=tmp_path)
    assert ev.returncode == 0, ev.stderr
    assert "logit lens" in ev.stdout and "tuned lens" in ev.stdout and (tmp_path / "lens-eval.png").is_file()
    tuned = nanolm("lens", run, "-p", "the dog", "--tuned", "--lens-dir", str(lens_dir), "--json", cwd=tmp_path)
    assert json.loads(tuned.stdout)["tuned"] is True

    probed = nanolm("probe", run, "--feature", "sentiment", "--n", "200", "--intervene", "--erase-at", "all", "--json",
                    cwd=tmp_path)
    assert probed.returncode == 0, probed.stderr
    result = json.loads(probed.stdout)
    assert [p["layer"] for p in result["layers"]] == ["embed", "0", "1"]
    assert result["intervention"]["layer"] == result["best_layer"] and len(result["intervention"]["random_deltas"]) == 10
    table = nanolm("probe", run, "--feature", "tense", "--n", "40", "--layers", "1", cwd=tmp_path)
    assert "selectivity" in table.stdout and "n_train = 30 ≤ dimension 64" in table.stderr


@pytest.mark.parametrize("args,message", [
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
])
def test_bad_input_is_one_line_and_exit_code_2(trained_run, tmp_path, args, message, nanolm):
    (tmp_path / "one.csv").write_text("text,label\nthe dog ran,past\nthe dog walked,past\n")
    (tmp_path / "nolabel.csv").write_text("text,tense\nthe dog ran,past\n")
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.jsonl").write_text('{"text": "the dog ran", "label": "past"}\n{"text": "the dog runs"}\n')
    (tmp_path / "list.jsonl").write_text('[1, 2]\n')
    (tmp_path / "array.json").write_text('[{"text": "the dog ran", "label": "past"}]')
    (tmp_path / "latin1.csv").write_bytes("text,label\nthe caf\xe9 ran,past\n".encode("latin-1"))
    (tmp_path / "short.csv").write_text("text,label\nthe dog ran,past\nthe dog runs\n")
    (tmp_path / "long.csv").write_text("text,label\n" + " ".join(["the"] * 40) + ",past\nthe dog,present\n")
    (tmp_path / "a_file").write_text("not a folder")
    fill = {"run": str(trained_run), "one_class": str(tmp_path / "one.csv"), "no_label": str(tmp_path / "nolabel.csv"),
            "not_lm": str(tmp_path / "bert"), "empty": str(tmp_path / "empty"),
            "jsonl_missing": str(tmp_path / "bad.jsonl"), "jsonl_list": str(tmp_path / "list.jsonl"),
            "json_array": str(tmp_path / "array.json"), "latin1": str(tmp_path / "latin1.csv"),
            "short_row": str(tmp_path / "short.csv"), "nodir": str(tmp_path / "nodir" / "lens.png"),
            "a_file": str(tmp_path / "a_file"), "too_long": str(tmp_path / "long.csv")}
    out = nanolm(*[a.format(**fill) for a in args], cwd=tmp_path)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert message in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_probe_and_intervention_on_a_local_hugging_face_model(hf_folder, tmp_path, nanolm):
    rows = [(f"the {who} {verb} and then it", label, verb, other) for who in ("dog", "cat", "bird", "fish", "man")
            for verb, other, label in (("ran", "runs", "past"), ("runs", "ran", "present"))]
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
    assert result["intervention"]["preference_base"] is not None and (tmp_path / "probe.png").is_file()


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
