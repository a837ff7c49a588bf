"""Steering (nanolm.interp.steering, steering_sweep, `nanolm steer`): α = 0 is the unsteered model token for
token; cached and uncached steered generation agree and steer the first generated token too (CAA #3,
steering-vectors #60); the direction, the norms and every sweep metric equal a computation written out here;
a sweep on a trained model moves the behaviour and costs fluency as α grows; bad input is one line."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from test_bad_input import assert_user_error

OMP = {"OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def view(trained_run):
    from nanolm.interp.view import load_view

    return load_view(trained_run)


@pytest.fixture(scope="module")
def directions(view):
    from nanolm.interp.steering import build_directions

    return build_directions(view, "sentiment", ["0", "1"], n=60)


def reference_greedy(view, ids: list[int], n: int, hook: str | None = None, add: torch.Tensor | None = None) -> list[int]:
    """Greedy decoding written out: the whole sequence every step, the vector added by a plain hook at every
    position (no cache, no batching, no steering helper)."""
    seq = list(ids)
    fns = {hook: (lambda x: x + add)} if hook is not None else {}
    with torch.no_grad(), view.hooks(fns):
        for _ in range(n):
            seq.append(int(view.logits(torch.tensor([seq]))[0, -1].argmax()))
    return seq[len(ids) :]


def cut(tokens: list[int], stop: int | None) -> list[int]:
    return tokens[: tokens.index(stop)] if stop is not None and stop in tokens else tokens


PROMPTS = ["the cat", "the dog felt", "her brother", "the king was"]


# ---- generation ----------------------------------------------------------------------------------


def test_alpha_zero_gives_exactly_the_unsteered_tokens(view, directions):
    from nanolm.interp.steering import row_uniforms, steer, stop_token

    d = directions["1"]
    greedy = steer(view, d, 0.0, PROMPTS, max_new_tokens=12, temperature=0)
    sampled = steer(view, d, 0.0, PROMPTS, max_new_tokens=12, seed=5, temperature=0.8, top_k=20)
    stop = stop_token(view)
    for i, p in enumerate(PROMPTS):
        ids = view.to_tokens(p)[0].tolist()
        ref = cut(reference_greedy(view, ids, 12), stop)
        assert greedy.samples[i].steered_tokens == greedy.samples[i].unsteered_tokens == ref
        assert sampled.samples[i].steered_tokens == sampled.samples[i].unsteered_tokens
        # sampling written out: inverse CDF of softmax(logits / 0.8) over the top 20, with the row's uniforms
        u = row_uniforms(5, i, 12)
        seq = list(ids)
        for t in range(12):
            with torch.no_grad():
                logits = view.logits(torch.tensor([seq]))[0, -1].double() / 0.8
            keep = logits >= torch.topk(logits, 20).values[-1]
            p_ = torch.softmax(logits.masked_fill(~keep, -math.inf), -1)
            seq.append(int((torch.cumsum(p_, 0) <= u[t].double() * p_.sum()).sum()))
            if seq[-1] == stop:
                break
        assert sampled.samples[i].unsteered_tokens == cut(seq[len(ids) :], stop)


def test_cached_and_uncached_steering_agree_and_steer_the_first_token(view, directions):
    from nanolm.interp.steering import steer, stop_token

    d = directions["0"]
    stop = stop_token(view)
    alpha = 2.0
    cached = steer(view, d, alpha, PROMPTS, max_new_tokens=12, temperature=0, use_cache=True)
    plain = steer(view, d, alpha, PROMPTS, max_new_tokens=12, temperature=0, use_cache=False)
    first_changed = 0
    for i, p in enumerate(PROMPTS):
        ids = view.to_tokens(p)[0].tolist()
        ref = cut(reference_greedy(view, ids, 12, d.info.hook, alpha * d.unit), stop)
        assert cached.samples[i].steered_tokens == plain.samples[i].steered_tokens == ref, p
        first_changed += cached.samples[i].steered_tokens[:1] != cached.samples[i].unsteered_tokens[:1]
    # the comparison means something only if steering changes the first token somewhere (CAA #3 left it unsteered)
    assert first_changed >= 1


def test_a_batch_of_mixed_settings_gives_each_row_its_own_text(view, directions):
    """Rows of different layers and α in one batch: each equals the row generated alone (no cross-talk)."""
    from nanolm.interp.steering import GenRow, Setting, generate

    ids = [view.to_tokens(p)[0].tolist() for p in PROMPTS]
    vectors = {d.info.hook: d.unit for d in directions.values()}
    rows = [
        GenRow(i, s, Setting(h, a))
        for i in range(len(ids))
        for s in (0, 1)
        for h, a in ((None, 0.0), (directions["0"].info.hook, 1.0), (directions["1"].info.hook, -1.5))
    ]
    together = generate(view, ids, rows, vectors, 10, batch_size=64)
    alone = [generate(view, ids, [r], vectors, 10, batch_size=1, use_cache=False)[0] for r in rows]
    assert together == alone
    assert len({tuple(t) for t in together}) > len(ids) * 2  # the settings do differ


def test_hugging_face_gpt2_steers_the_same_cached_and_uncached(tmp_path):
    from conftest import word_level_gpt2
    from nanolm.interp.steering import build_directions, steer
    from nanolm.interp.view import view_of

    words = ["<unk>", "<bos>", "the", "cat", "dog", "felt", "happy", "sad", "and", "ran", "."]
    model, tok = word_level_gpt2(words, n_positions=24)
    view = view_of(model, tok, "tiny-gpt2")
    pairs = tmp_path / "mood.jsonl"
    pairs.write_text(
        "\n".join(json.dumps({"prompt": f"the {a} felt", "positive": "happy", "negative": "sad"}) for a in ("cat", "dog")) + "\n"
    )
    d = build_directions(view, str(pairs), ["1"])["1"]
    assert d.info.n_positive == d.info.n_negative == 2 and d.info.hook == "blocks.1.hook_resid_post"
    prompts = ["the cat", "the dog felt"]
    for alpha in (0.0, 3.0):
        cached = steer(view, d, alpha, prompts, max_new_tokens=8, temperature=0)
        plain = steer(view, d, alpha, prompts, max_new_tokens=8, temperature=0, use_cache=False)
        for i, p in enumerate(prompts):
            ids = view.to_tokens(p)[0].tolist()
            ref = reference_greedy(view, ids, 8, d.info.hook if alpha else None, alpha * d.unit)
            assert cached.samples[i].steered_tokens == plain.samples[i].steered_tokens == ref
            if alpha == 0:  # and Hugging Face's own generate agrees
                out = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)
                assert out[0, len(ids) :].tolist() == cached.samples[i].unsteered_tokens
    assert any(s.steered_tokens != s.unsteered_tokens for s in cached.samples)
    # a random model repeats one token greedily, so compare the logits themselves, step by step
    check_cached_logits(view, d, 3.0, view.to_tokens("the cat felt")[0].tolist(), [2, 4, 8, 5, 10, 3, 9])


def check_cached_logits(view, d, alpha: float, prompt: list[int], rest: list[int]) -> None:
    """Each cached step's steered next-token logits equal a full uncached pass with the vector added by a plain hook."""
    from nanolm.interp.steering import Setting, _Decoder, steered

    seq = prompt + rest
    with torch.no_grad(), view.edit(d.info.hook, lambda x: x + alpha * d.unit):
        full = view.logits(torch.tensor([seq]))[0].float()  # [T, V]
    with torch.no_grad(), steered(view, {d.info.hook: d.unit}, [Setting(d.info.hook, alpha)]):
        dec = _Decoder(view, use_cache=True)
        steps = [dec.first(torch.tensor([prompt]))[0]]
        steps += [dec.next(torch.tensor([seq[: k + 1]]))[0] for k in range(len(prompt), len(seq) - 1)]
    with torch.no_grad():
        unsteered = view.logits(torch.tensor([seq]))[0].float()
    for j, logits in enumerate(steps):
        pos = len(prompt) - 1 + j
        assert torch.allclose(logits, full[pos], atol=1e-4), pos
        assert not torch.allclose(logits, unsteered[pos], atol=1e-3), pos  # steering is on at this step


@pytest.mark.parametrize("arch", ["llama", "gpt_neox"])
def test_llama_and_neox_layouts_steer_the_same_cached_and_uncached(arch):
    from conftest import word_level_gpt2

    transformers = pytest.importorskip("transformers")
    from nanolm.interp.steering import Direction, DirectionInfo
    from nanolm.interp.view import view_of

    words = ["<unk>", "<bos>", "the", "cat", "dog", "felt", "happy", "sad", "and", "ran", "."]
    _, tok = word_level_gpt2(words)
    torch.manual_seed(0)
    common = dict(
        vocab_size=len(words),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    model = (
        transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
        if arch == "llama"
        else transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(**common))
    )
    view = view_of(model.eval(), tok, arch)
    v = torch.randn(view.d_model)
    d = Direction(DirectionInfo("random", "0", "blocks.0.hook_resid_post", "raw", float(v.norm()), 1.0, float(v.norm())), v)
    check_cached_logits(view, d, 2.0, [1, 2, 3, 5], [6, 8, 2, 4, 9])


def test_an_sae_decoder_row_is_a_direction_at_the_sae_layer(view, tmp_path):
    from nanolm.errors import UserError
    from nanolm.interp.sae.model import SAEConfig, SparseAutoencoder
    from nanolm.interp.sae.pipeline import fingerprint
    from nanolm.interp.steering import build_directions, sae_layer

    torch.manual_seed(0)
    sae = SparseAutoencoder(
        SAEConfig(
            view.d_model,
            4 * view.d_model,
            hook_name="blocks.1.hook_resid_post",
            hook_layer=1,
            model_fingerprint=fingerprint(view),
        )
    )
    sae.save(tmp_path / "sae")
    spec = f"sae:{tmp_path / 'sae'}:5"
    assert sae_layer(spec) == "1"
    d = build_directions(view, spec, ["1"])["1"]
    assert torch.equal(d.vector.cpu(), sae.W_dec[5].detach()) and d.info.hook == "blocks.1.hook_resid_post"
    assert float(d.unit.norm()) == pytest.approx(d.info.resid_norm, rel=1e-5)
    with pytest.raises(UserError, match="steers at layer 1"):
        build_directions(view, spec, ["0"])
    with pytest.raises(UserError, match="out of range"):
        build_directions(view, f"sae:{tmp_path / 'sae'}:{4 * view.d_model}", ["1"])


def test_steer_sweep_on_a_hugging_face_folder(tmp_path, cli):
    from conftest import word_level_gpt2

    words = ["<unk>", "<bos>", "the", "cat", "dog", "felt", "was", "happy", "sad", "and", "ran", "."]
    model, tok = word_level_gpt2(words, n_positions=32)
    model.save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    (tmp_path / "mood.jsonl").write_text(
        "".join(
            json.dumps({"prompt": f"the {a} {b}", "positive": "happy", "negative": "sad"}) + "\n"
            for a in ("cat", "dog")
            for b in ("felt", "was")
        )
    )
    out = cli(
        "steer",
        "sweep",
        str(tmp_path / "tiny"),
        "--direction",
        "mood.jsonl",
        "--alphas",
        "0,1,4",
        "--seeds",
        "1",
        "--prompts",
        "3",
        "--max-new-tokens",
        "4",
        "--json",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["metric"] == "matching" and r["layers"] == ["0", "1"] and r["plot"] is None
    assert len(r["cells"]) == 6 and all(0 < c["behaviour"] < 1 for c in r["cells"])
    one = cli(
        "steer",
        str(tmp_path / "tiny"),
        "--direction",
        "mood.jsonl",
        "--layer",
        "1",
        "--alpha",
        "2",
        "-p",
        "the cat",
        "--max-new-tokens",
        "4",
        cwd=tmp_path,
    )
    assert one.returncode == 0 and "steered (α = 2)" in one.stdout, one.stderr


def test_nanolm_cached_steps_see_the_same_steered_logits(view, directions):
    ids = view.to_tokens("the cat felt")[0].tolist()
    check_cached_logits(view, directions["1"], 1.5, ids, view.tokenizer.encode("happy because it won the game ."))


# ---- the direction and its norms --------------------------------------------------------------------


def test_mean_difference_direction_and_norms_equal_a_float64_computation(view, directions):
    from nanolm.interp.probes import feature_dataset
    from nanolm.interp.steering import build_directions, neutral_texts

    data = feature_dataset("sentiment", 60, 0)
    texts = neutral_texts(view)
    for layer, d in directions.items():
        hook = f"blocks.{layer}.hook_resid_post"
        rows = {"happy": [], "sad": []}
        for text, label in zip(data.texts, data.labels):
            _, cache = view.run_with_cache(view.to_tokens(text), [hook])
            rows[label].append(cache[hook][0, -1].double())
        v = torch.stack(rows["happy"]).mean(0) - torch.stack(rows["sad"]).mean(0)
        assert torch.allclose(d.vector.double(), v, atol=1e-5, rtol=1e-5)
        norms = []
        for ids in texts:
            _, cache = view.run_with_cache(torch.tensor([ids]), [hook])
            norms += cache[hook][0, 1:].double().norm(dim=-1).tolist()  # the start token left out
        r = sum(norms) / len(norms)
        assert d.info.resid_norm == pytest.approx(r, rel=1e-6)
        assert d.info.raw_norm == pytest.approx(float(v.norm()), rel=1e-5)
        assert float(d.unit.norm()) == pytest.approx(r, rel=1e-5)  # α = 1 adds one mean residual norm
    raw = build_directions(view, "sentiment", ["1"], scale="raw", n=60)["1"]
    assert torch.equal(raw.unit, raw.vector) and raw.info.added_norm(2.0) == pytest.approx(2 * raw.info.raw_norm)


def test_a_pairs_file_is_read_at_prompt_plus_completion(view, tmp_path):
    from nanolm.interp.steering import build_directions

    rows = [("the cat felt", "happy", "sad"), ("the dog was", "glad", "upset"), ("the girl felt", "cheerful", "gloomy")]
    f = tmp_path / "mood.jsonl"
    f.write_text(
        "".join(
            json.dumps({"question": p, "answer_matching_behavior": a, "answer_not_matching_behavior": b}) + "\n"
            for p, a, b in rows
        )
    )  # CAA's key names
    d = build_directions(view, str(f), ["1"])["1"]
    hook = "blocks.1.hook_resid_post"

    def last(text):
        return view.run_with_cache(view.to_tokens(text), [hook])[1][hook][0, -1].double()

    v = torch.stack([last(f"{p} {a}") for p, a, _ in rows]).mean(0) - torch.stack([last(f"{p} {b}") for p, _, b in rows]).mean(0)
    assert (
        torch.allclose(d.vector.double(), v, atol=1e-5)
        and d.info.name == "mood: answer_matching_behavior − answer_not_matching_behavior"
    )


# ---- metrics against hand computations ----------------------------------------------------------------


def test_distinct_n_and_happy_share_by_hand():
    from nanolm.interp.steering import sentiment_lexicon
    from nanolm.interp.steering_sweep import distinct_n, happy_share

    assert distinct_n([[1, 2, 3], [1, 2, 4]]) == pytest.approx(3 / 4)  # (1,2) twice, (2,3), (2,4)
    assert distinct_n([[5, 5, 5, 5]]) == pytest.approx(1 / 3)
    assert math.isnan(distinct_n([[1], []]))
    happy, sad = sentiment_lexicon()
    assert {"happy", "glad", "smiled", "puppy"} <= happy and {"sad", "cried", "alone"} <= sad
    assert not {"the", "saw", "old", "and", "felt", "because"} & (happy | sad)  # words other sentences use too
    share, n = happy_share(["the cat felt happy and smiled all day .", "the dog was sad ."])
    assert (share, n) == (pytest.approx(2 / 3), 3)  # happy, smiled against sad ("all", "day" are on both sides or elsewhere)


def test_kl_perplexity_and_p_matching_equal_direct_computations(view, directions):
    from nanolm.interp.steering import UNSTEERED, Setting
    from nanolm.interp.steering_sweep import matching_inputs, next_token_kl, p_matching, score_tokens

    d = directions["1"]
    vectors = {d.info.hook: d.unit}
    s = Setting(d.info.hook, 0.7)
    texts = [view.to_tokens(t)[0].tolist() for t in ("the cat saw a red hill .", "two plus two equals four .", "the dog")]
    kl = next_token_kl(view, texts, vectors, [UNSTEERED, s], batch_size=2)
    total, n = 0.0, 0
    for ids in texts:
        x = torch.tensor([ids])
        with torch.no_grad():
            p = torch.log_softmax(view.logits(x)[0].double(), -1)
            with view.edit(d.info.hook, lambda h: h + 0.7 * d.unit):
                q = torch.log_softmax(view.logits(x)[0].double(), -1)
        total += float((p.exp() * (p - q)).sum())
        n += len(ids)
    assert kl[0] == 0.0 and kl[1] == pytest.approx(total / n, rel=1e-4)

    seqs, starts = [texts[0], texts[1]], [3, 1]
    logp, count = score_tokens(view, seqs, starts, vectors, s, batch_size=1)
    for k, ids in enumerate(seqs):
        with torch.no_grad(), view.edit(d.info.hook, lambda h: h + 0.7 * d.unit):
            lp = torch.log_softmax(view.logits(torch.tensor([ids]))[0].double(), -1)
        want = sum(float(lp[j - 1, ids[j]]) for j in range(starts[k], len(ids)))
        assert float(logp[k]) == pytest.approx(want, rel=1e-4) and count[k] == len(ids) - starts[k]

    pairs = [("the cat felt", "happy", "sad"), ("the dog was", "glad", "upset")]
    got = p_matching(view, *matching_inputs(view, pairs), vectors, s)
    want = []
    for prompt, a, b in pairs:
        with torch.no_grad(), view.edit(d.info.hook, lambda h: h + 0.7 * d.unit):
            lp = torch.softmax(view.logits(view.to_tokens(prompt))[0, -1].double(), -1)
        pa, pb = lp[view.tokenizer.encode(a)[0]], lp[view.tokenizer.encode(b)[0]]
        want.append(float(pa / (pa + pb)))
    assert got == pytest.approx(sum(want) / len(want), rel=1e-4)


# ---- the sweep -----------------------------------------------------------------------------------


def test_sweep_on_a_trained_model_moves_sentiment_and_costs_fluency(view):
    from nanolm.interp.steering_sweep import sweep, sweep_figure

    alphas = [0.0, 0.5, 2.0, 4.0]
    r = sweep(view, "sentiment", ["0", "1"], alphas, seeds=2, n_prompts=24, max_new_tokens=12, n_texts=100)
    base = r.unsteered
    assert base.kl == 0.0 and base.change == 0.0 and r.cell("0", 0.0).behaviour == base.behaviour
    # behaviour: at some layer the happy share and the log-odds rise with α
    assert any(r.cell(layer, 2.0).behaviour > base.behaviour + 0.15 for layer in r.layers)
    assert any(r.cell(layer, 2.0).log_odds > r.cell(layer, 0.5).log_odds > base.log_odds for layer in r.layers)
    # fluency: KL grows with α at every layer, and the text read by the unsteered model gets less likely
    for layer in r.layers:
        kls = [r.cell(layer, a).kl for a in alphas]
        assert kls == sorted(kls) and kls[-1] > 1.0
        assert r.cell(layer, 4.0).perplexity > 2 * base.perplexity
    assert any(a is not None for a in r.falls_apart.values())
    if r.best is not None:
        assert r.best.kl <= r.max_kl and not r.best.fallen_apart and r.best.alpha != 0
    fig = sweep_figure(r)
    assert len(fig.axes) >= 4


def test_sweep_with_a_pairs_metric_scores_p_matching(view):
    from nanolm.interp.steering_sweep import sweep

    r = sweep(view, "tense", ["1"], [0.0, 1.0], seeds=1, n_prompts=4, max_new_tokens=4, n_texts=60)
    cell = r.cell("1", 1.0)
    assert r.metric == "matching" and 0 < r.unsteered.behaviour < 1 and cell.behaviour_seeds == [cell.behaviour]


# ---- the command -----------------------------------------------------------------------------------


def test_steer_command_json_and_table(trained_run, tmp_path, cli):
    out = cli(
        "steer",
        str(trained_run),
        "--direction",
        "sentiment",
        "--layer",
        "1",
        "--alpha",
        "1",
        "-p",
        "the cat",
        "--temperature",
        "0",
        "--max-new-tokens",
        "8",
        "--json",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["direction"]["hook"] == "blocks.1.hook_resid_post" and res["direction"]["scale"] == "residual"
    assert res["added_norm"] == pytest.approx(res["direction"]["resid_norm"], rel=1e-6)
    assert len(res["samples"]) == 1 and res["samples"][0]["prompt"] == "the cat"
    table = cli(
        "steer", str(trained_run), "--direction", "sentiment", "--layer", "1", "--alpha", "1", "-p", "the cat", cwd=tmp_path
    )
    assert table.returncode == 0 and "unsteered" in table.stdout and "steered (α = 1)" in table.stdout
    assert "mean residual norm" in table.stdout


def test_steer_sweep_command_prints_table_best_and_writes_heatmaps(trained_run, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nanolm",
            "steer",
            "sweep",
            str(trained_run),
            "--direction",
            "sentiment",
            "--layers",
            "0,1",
            "--alphas",
            "0,1,4",
            "--seeds",
            "2",
            "--prompts",
            "8",
            "--max-new-tokens",
            "8",
            "--plot",
            str(tmp_path / "s.png"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**__import__("os").environ, **OMP, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "happy share" in proc.stdout and "best" in proc.stdout and "falls apart" in proc.stdout
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"


BAD = [
    (["--direction", "happiness", "--layer", "1", "--alpha", "1"], ["unknown direction 'happiness'", "sentiment"]),
    (["--direction", "sentiment", "--layer", "7", "--alpha", "1"], ["layer 7 is out of range", "0..1"]),
    (["--direction", "sentiment", "--layer", "1", "--alpha", "lots"], ["--alpha 'lots' is not a number"]),
    (["--direction", "sentiment", "--layer", "1", "--alpha", "nan"], ["not a finite number"]),
    (["--direction", "sentiment", "--alpha", "1"], ["give --layer"]),
    (["--direction", "sentiment", "--layer", "1", "--alpha", "1", "--max-new-tokens", "40"], ["context of 32"]),
    (["--direction", "nope.jsonl", "--layer", "1", "--alpha", "1"], ["no such file"]),
    (["--direction", "sae:nowhere:3", "--alpha", "1"], ["not an SAE folder"]),
]


@pytest.mark.parametrize("args,names", BAD, ids=[" ".join(a[:2]) + " " + a[-1] for a, _ in BAD])
def test_bad_input_is_one_line(trained_run, tmp_path, cli, args, names):
    out = cli("steer", str(trained_run), *args, "-p", "the cat", cwd=tmp_path)
    assert_user_error(out.returncode, out.stderr, *names)


@pytest.mark.parametrize(
    "content,names",
    [
        (
            '{"text": "the cat was happy", "label": "happy"}\n{"text": "the dog was glad", "label": "happy"}\n',
            ["one label ('happy')", "two classes"],
        ),
        ('{"prompt": "the cat felt", "positive": "happy"}\n', ["pairs.jsonl:1", "'negative'"]),
        ('{"prompt": "the cat felt", "positive": "happy", "negative": "sad"}\nnot json\n', ["pairs.jsonl:2", "JSON object"]),
        ('{"prompt": "the cat felt", "positive": "sad", "negative": "sad"}\n', ["pairs.jsonl:1", "the same"]),
        ('{"prompt": "the cat felt", "good": "happy"}\n', ["no 'positive' and 'negative' columns"]),
    ],
)
def test_bad_pairs_files_are_one_line(trained_run, tmp_path, cli, content, names):
    (tmp_path / "pairs.jsonl").write_text(content)
    out = cli(
        "steer", str(trained_run), "--direction", "pairs.jsonl", "--layer", "1", "--alpha", "1", "-p", "the cat", cwd=tmp_path
    )
    assert_user_error(out.returncode, out.stderr, *names)


def test_sweep_bad_input_is_one_line(trained_run, tmp_path, cli):
    for args, names in [
        (["--alphas", "0,x"], ["--alphas", "'x' is not a number"]),
        (["--layers", "0,9"], ["layer 9 is out of range"]),
        (["--seeds", "0"], ["--seeds must be at least 1"]),
        (["--max-kl", "0"], ["--max-kl must be > 0"]),
    ]:
        out = cli("steer", "sweep", str(trained_run), "--direction", "sentiment", *args, cwd=tmp_path)
        assert_user_error(out.returncode, out.stderr, *names)
    (tmp_path / "mood.csv").write_text("text,label\nthe cat was happy,happy\nthe dog was sad,sad\n")
    out = cli("steer", "sweep", str(trained_run), "--direction", "mood.csv", cwd=tmp_path)
    assert_user_error(out.returncode, out.stderr, "no options to score", "--metric sentiment")


def test_a_model_with_no_tokenizer_is_one_line(tmp_path, cli):
    from conftest import word_level_gpt2

    model, _ = word_level_gpt2(["<unk>", "<bos>", "the", "cat"])
    model.save_pretrained(tmp_path / "bare")  # weights and config only
    out = cli(
        "steer", str(tmp_path / "bare"), "--direction", "sentiment", "--layer", "0", "--alpha", "1", "-p", "the cat", cwd=tmp_path
    )
    assert_user_error(out.returncode, out.stderr, "has no tokenizer")
