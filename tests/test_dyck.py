"""Dyck-(k, m): generator, recognizer, next-token sets, the precision bound and the experiment, checked
against references written here (a stack recognizer, words enumerated from the grammar, all bf16 and
fp16 bit patterns)."""

from __future__ import annotations

import itertools
import json
from functools import cache

import numpy as np
import pytest
import torch

from nanolm.cli import main
from nanolm.errors import UserError
from nanolm.formal import (
    depth_profile,
    depth_stats,
    finite_float_values,
    from_string,
    generate,
    max_trackable_depth,
    next_token_sets,
    precision_table,
    recognize,
    to_string,
)

torch.set_num_threads(1)


def ref_recognize(tokens, k, m=None) -> bool:
    """Stack reference: opens push, a close must match the top, END (2k) only last, depth ≤ m."""
    stack = []
    for i, t in enumerate(tokens):
        if t == 2 * k:
            if i != len(tokens) - 1:
                return False
        elif t < k:
            stack.append(t)
            if m is not None and len(stack) > m:
                return False
        elif not stack or stack[-1] != t - k:
            return False
        else:
            stack.pop()
    return not stack


@cache
def grammar_words(length: int, budget: int, k: int) -> tuple[tuple[int, ...], ...]:
    """Every balanced string of exactly `length` brackets nested at most `budget` deep, from the
    grammar S -> ε | open_i S close_i S (no stack involved)."""
    if length == 0:
        return ((),)
    if budget == 0:
        return ()
    out = []
    for inner in range(0, length - 1, 2):
        for i in range(k):
            for a in grammar_words(inner, budget - 1, k):
                for b in grammar_words(length - 2 - inner, budget, k):
                    out.append((i, *a, k + i, *b))
    return tuple(out)


# ---- generator ----------------------------------------------------------------------------------


@pytest.mark.parametrize("k,m", [(1, 1), (1, 3), (2, 2), (2, 4), (3, 3)])
def test_generator_emits_only_valid_strings_up_to_depth_m_and_reaches_it(k, m):
    seqs = generate(k, m, 400, seed=k * 10 + m)
    assert len(seqs) == 400
    for s in seqs:
        assert s[-1] == 2 * k and 2 * k not in s[:-1]
        assert ref_recognize(s, k, m), to_string(s, k)
        stack_depth = np.cumsum([1 if t < k else -1 if t < 2 * k else 0 for t in s])
        assert stack_depth.max(initial=0) <= m
    assert max(depth_profile(s, k).max() for s in seqs) == m  # depth m is reached


def test_generator_is_seeded_and_follows_its_probabilities():
    assert generate(2, 4, 50, seed=3) == generate(2, 4, 50, seed=3)
    assert generate(2, 4, 50, seed=3) != generate(2, 4, 50, seed=4)
    seqs = generate(2, 6, 3000, seed=0, p_end=0.3, open_probs=[3, 1])
    ends = opens_empty = opens_mid = closes_mid = forced = 0
    type0 = type1 = 0
    for s in seqs:
        depth = 0
        for t in s:
            if depth == 0:
                ends += t == 4
                opens_empty += t < 2
            elif depth < 6:
                opens_mid += t < 2
                closes_mid += 2 <= t < 4
            else:
                forced += 1
                assert 2 <= t < 4  # at depth m: close
            type0 += t == 0
            type1 += t == 1
            depth += 1 if t < 2 else -1 if t < 4 else 0
    assert ends / (ends + opens_empty) == pytest.approx(0.3, abs=0.02)
    assert opens_mid / (opens_mid + closes_mid) == pytest.approx(0.5, abs=0.01)
    assert type0 / (type0 + type1) == pytest.approx(0.75, abs=0.01)
    assert forced > 0


def test_generator_length_and_depth_conditions():
    seqs = generate(2, 5, 100, seed=1, max_len=40, min_depth=5)
    assert all(len(s) <= 40 and depth_profile(s, 2).max() == 5 for s in seqs)
    with pytest.raises(UserError, match="max_len"):
        generate(2, 5, 10, max_len=6, min_depth=5)


# ---- recognizer ---------------------------------------------------------------------------------


def test_recognizer_agrees_with_a_stack_reference_on_10_000_strings():
    rng = np.random.default_rng(0)
    k = 2
    valid = generate(k, 4, 2000, seed=5)
    cases: list[list[int]] = []
    for _ in range(4000):  # uniform random strings: mostly invalid
        cases.append(rng.integers(0, 2 * k + 1, size=rng.integers(0, 13)).tolist())
    for s in valid[:3000]:  # valid, with and without END, and one-token mutations of them
        cases.append(s)
        cases.append(s[:-1])
        mutated = list(s)
        i = rng.integers(0, len(mutated))
        mutated[i] = int(rng.integers(0, 2 * k + 1))
        cases.append(mutated)
    cases = cases[:10_000]
    assert len(cases) == 10_000
    accepted = 0
    for s in cases:
        for m in (None, 2, 4):
            want = ref_recognize(s, k, m)
            assert recognize(s, k, m) == want, (to_string(s, k), m)
            accepted += want
    assert accepted > 5000  # both answers are well represented


@pytest.mark.parametrize(("k", "m"), [(1, None), (2, None), (2, 2), (3, 1)])
def test_recognizer_accepts_exactly_the_grammars_words(k, m):
    """Every string of brackets up to length 8 (no stack in the reference: the words come from the
    grammar S -> ε | open_i S close_i S)."""
    for n in range(9):
        words = set(grammar_words(n, m if m is not None else n, k))
        for s in itertools.product(range(2 * k), repeat=n):
            assert recognize(list(s), k, m) == (s in words), (to_string(list(s), k), m)


def test_recognizer_edge_cases():
    assert recognize([], 2) and recognize([4], 2)  # the empty word, with or without END
    assert not recognize([4, 4], 2) and not recognize([0, 4, 2], 2)  # END only last
    assert recognize(from_string("([])", 2), 2, 2) and not recognize(from_string("([])", 2), 2, 1)
    assert not recognize(from_string("([)]", 2), 2)
    assert not recognize([7], 2)  # not a symbol


# ---- next-token sets ----------------------------------------------------------------------------


@pytest.mark.parametrize("m,L", [(3, 12), (None, 12)])
def test_next_token_sets_match_the_grammar(m, L):
    """Symbol a may follow prefix p iff p+a is a prefix of a word (END: p itself is a word). With
    words up to length L enumerated, that is complete for prefixes short enough to be closed within L."""
    k = 2
    words = [w for n in range(0, L + 1, 2) for w in grammar_words(n, m if m is not None else n // 2, k)]
    allowed: dict[tuple[int, ...], set[int]] = {}
    for w in words:
        allowed.setdefault(w, set()).add(2 * k)
        for i in range(len(w)):
            allowed.setdefault(w[:i], set()).add(w[i])
    max_prefix = L - (m if m is not None else L) - 1 if m is not None else (L - 2) // 2
    checked = 0
    for p, symbols in allowed.items():
        if len(p) > max_prefix:
            continue
        row = next_token_sets(list(p), k, m)[-1]
        assert set(np.flatnonzero(row).tolist()) == symbols, (to_string(p, k), m)
        checked += 1
    assert checked > 50
    # Prefixes that are not prefixes of any word have no continuation.
    rng = np.random.default_rng(1)
    for _ in range(300):
        p = tuple(rng.integers(0, 2 * k, size=rng.integers(1, max_prefix + 1)).tolist())
        if p not in allowed:
            assert not next_token_sets(list(p), k, m)[-1].any(), to_string(p, k)


def test_next_token_sets_rows_cover_every_prefix():
    s = from_string("(())[]", 2)
    rows = next_token_sets(s, 2, 2)
    assert rows.shape == (7, 5)
    names = ["(", "[", ")", "]", "$"]
    as_sets = ["".join(n for n, on in zip(names, r) if on) for r in rows]
    assert as_sets == ["([$", "([)", ")", "([)", "([$", "([]", "([$"]  # at depth m=2, only the close
    assert not next_token_sets(s + [4], 2, 2)[-1].any()  # nothing after END


def test_depth_stats():
    seqs = [from_string("(())$", 2), from_string("[]$", 2), from_string("$", 2)]
    st = depth_stats(seqs, 2)
    assert st.sequences == 3 and st.max_length == 5 and st.mean_length == pytest.approx(3.0)
    assert st.max_depth_counts == {0: 1, 1: 1, 2: 1} and st.mean_max_depth == pytest.approx(1.0)
    assert st.position_depth_counts == {0: 5, 1: 3, 2: 1}  # after each token, END included


# ---- finite precision ---------------------------------------------------------------------------


def test_float_value_counts_match_every_bit_pattern():
    bits = torch.arange(65536, dtype=torch.int32).to(torch.int16)
    bf16 = bits.view(torch.bfloat16).float()
    assert finite_float_values(8, 7) == len(torch.unique(bf16[torch.isfinite(bf16)]))
    fp16 = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    assert finite_float_values(5, 10) == len(np.unique(fp16[np.isfinite(fp16)]))
    assert finite_float_values(8, 23) == 2**32 - 2**24 - 1


def test_max_trackable_depth_against_brute_force():
    for k in (2, 3, 5):
        for v, h in ((256, 1), (256, 2), (65279, 1), (3, 4)):
            states = v**h
            d = 0
            while sum(k**j for j in range(d + 2)) <= states:
                d += 1
            single = 0
            while k ** (single + 1) <= states:
                single += 1
            assert max_trackable_depth(k, h, v) == (d, single), (k, v, h)
    rows = {(r.precision, r.hidden): r for r in precision_table(2, (1, 64)).rows}
    assert rows[("int8", 1)].max_depth == 7  # 2^8 − 1 = 255 ≤ 256 < 511
    assert rows[("fp32", 64)].max_depth_single == int(64 * np.log2(finite_float_values(8, 23)))
    assert precision_table(1, (1024,)).rows[0].max_depth is None  # far too large to print: a counter suffices


# ---- CLI ----------------------------------------------------------------------------------------


def run_cli(argv, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(argv)
    captured = capsys.readouterr()
    return exc.value.code, captured.out, captured.err


@pytest.mark.parametrize(
    "argv,name",
    [
        (["dyck", "generate", "--k", "0"], "--k"),
        (["dyck", "generate", "--m", "0"], "--m"),
        (["dyck", "generate", "--m", "-3"], "--m"),
        (["dyck", "recognize", "()", "--k", "-1"], "--k"),
        (["dyck", "experiment", "--k", "0"], "--k"),
        (["dyck", "experiment", "--train-depth", "0"], "--train-depth"),
        (["dyck", "experiment", "--train-depth", "5", "--test-depth", "3"], "--test-depth"),
        (["dyck", "precision", "--k", "0"], "--k"),
        (["dyck", "precision", "-h", "0"], "--hidden"),
        (["dyck", "precision", "-p", "fp8"], "fp8"),
        (["dyck", "recognize", "(x)"], "'x'"),
        (["dyck", "recognize"], "STRINGS"),
        (["dyck", "generate", "--p-end", "1.5"], "--p-end"),
        (["dyck", "generate", "--seed", "-1"], "--seed"),
        (
            ["dyck", "experiment", "--test-depth", "20", "--max-len", "41", "--models", "lstm", "--seeds", "1", "--steps", "1"],
            "use --max-len",
        ),
    ],
)
def test_bad_dyck_arguments_are_one_line_errors(argv, name, capsys):
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nanolm: error: ") and name in lines[0], err


def test_cli_generate_and_recognize(capsys):
    code, out, _ = run_cli(["dyck", "generate", "--k", "3", "--m", "2", "--n", "20", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and len(data["strings"]) == 20
    assert all(ref_recognize(t, 3, 2) for t in data["tokens"])
    assert all(from_string(s, 3) == t for s, t in zip(data["strings"], data["tokens"]))
    code, out, _ = run_cli(["dyck", "recognize", "([])", "([)]", "--json"], capsys)
    assert [r["valid"] for r in json.loads(out)] == [True, False]


def test_experiment_end_to_end_on_a_tiny_setting(tmp_path, capsys):
    plot = tmp_path / "depth.png"
    code, out, err = run_cli(
        [
            "dyck",
            "experiment",
            "--k",
            "2",
            "--train-depth",
            "2",
            "--test-depth",
            "3",
            "--seeds",
            "2",
            "--hidden",
            "8",
            "--steps",
            "30",
            "--eval-sequences",
            "20",
            "--max-len",
            "32",
            "--plot",
            str(plot),
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    result = json.loads(out)
    assert len(result["runs"]) == 6 and len(result["points"]) == 6 * 3
    assert {(p["model"], p["depth"]) for p in result["points"]} == {
        (m, d) for m in ("relu-rnn", "lstm", "transformer") for d in (1, 2, 3)
    }
    for p in result["points"]:
        assert 0.0 <= p["sequence_accuracy"] <= 1.0 and 0.0 <= p["position_accuracy"] <= 1.0 and p["sequences"] == 20
        # each wrong string has at least one wrong position (pooled position accuracy may still be below
        # sequence accuracy when the wrong strings are the long ones)
        wrong_strings = round((1 - p["sequence_accuracy"]) * p["sequences"])
        assert wrong_strings <= round((1 - p["position_accuracy"]) * p["positions"])
    assert len(result["summary"]) == 9 and result["precision"]["rows"][0]["hidden"] == 8
    for p in result["points"]:  # JSON keys are strings; stack depths run from 0 to the strings' depth
        assert {int(d) for d in p["by_stack_depth"]} == set(range(p["depth"] + 1))
        assert all(0.0 <= a <= 1.0 for a in p["by_stack_depth"].values())
    assert {r["stack_depth"] for r in result["deepest_by_stack_depth"]} == {0, 1, 2, 3}
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(err.splitlines()) == 6  # one progress line per model and seed
    # The table form too.
    from nanolm.cli.formal import print_experiment
    from nanolm.formal.experiment import DyckExperimentConfig, run_dyck_experiment

    res = run_dyck_experiment(
        DyckExperimentConfig(
            k=2, train_depth=1, test_depth=2, seeds=1, models=("lstm",), hidden=8, steps=5, eval_sequences=5, max_len=16
        )
    )
    from rich.console import Console

    console = Console(record=True, width=150)
    print_experiment(res, console)
    text = console.export_text()
    assert "whole-sequence accuracy" in text and "by the stack depth" in text


def test_training_learns_the_task_at_train_depth():
    """The labels and the loss are right if a small LSTM gets shallow strings right."""
    from nanolm.formal.experiment import DyckExperimentConfig, encode_batch, run_dyck_experiment

    x, y, mask = encode_batch([from_string("([])$", 2)], 2)
    assert x.tolist() == [[0, 1, 3, 2]] and mask.all()
    assert y[0].bool().tolist() == next_token_sets([0, 1, 3, 2], 2)[1:].tolist()
    res = run_dyck_experiment(
        DyckExperimentConfig(
            k=2,
            train_depth=2,
            test_depth=2,
            seeds=1,
            models=("lstm",),
            hidden=16,
            steps=300,
            lr=1e-2,
            eval_sequences=50,
            max_len=32,
            train_p_end=0.3,
        )
    )
    assert min(p.position_accuracy for p in res.points) > 0.97


def test_the_head_split_applies_only_when_a_transformer_is_trained():
    from nanolm.formal.experiment import DyckExperimentConfig

    DyckExperimentConfig(models=("lstm",), hidden=7).validate()  # an LSTM has no heads
    with pytest.raises(UserError, match="must split into 4 heads"):
        DyckExperimentConfig(models=("lstm", "transformer"), hidden=7).validate()


def test_settings_that_cannot_finish_stop_with_one_line(monkeypatch):
    """--m 100000 --p-end 0.0001 once sampled for minutes with no output: the walk's strings are far too long.
    Sampling has a token budget (lowered here so the test is quick) and says which knob to turn."""
    import nanolm.formal.dyck as dyck

    monkeypatch.setattr(dyck, "MAX_SAMPLED_TOKENS", 20_000)
    with pytest.raises(UserError, match=r"sampling stopped after 20,000 tokens: with m=100000 and p_end=0.0001"):
        dyck.generate(2, 100_000, 1, seed=0, p_end=0.0001)
    assert len(dyck.generate(2, 4, 20, seed=0)) == 20  # ordinary settings stay far inside the budget


def test_the_experiment_plot_goes_under_runs_not_into_the_working_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(
        [
            "dyck",
            "experiment",
            "--train-depth",
            "1",
            "--test-depth",
            "2",
            "--seeds",
            "1",
            "--models",
            "lstm",
            "--hidden",
            "4",
            "--steps",
            "5",
            "--eval-sequences",
            "5",
            "--max-len",
            "16",
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    [plot] = (tmp_path / "runs" / "figures").glob("*-dyck-depth.png")
    assert json.loads(out)["plot"] == str(plot.relative_to(tmp_path)) and [p.name for p in tmp_path.iterdir()] == ["runs"]
