"""DFAs and their exact ReLU-RNNs, checked against references written here: brute-force enumeration
of strings, direct predicates for the builders, and Myhill–Nerode classes counted by brute force."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

from nanolm.cli import main
from nanolm.errors import UserError
from nanolm.formal import (
    DFA,
    UnreachableStatesWarning,
    compile_dfa_to_relu_rnn,
    contains,
    divisible_by,
    load_dfa,
    parity,
    random_dfa,
    save_dfa,
    verify_rnn,
)

torch.set_num_threads(1)


def words(alphabet, max_len):
    """Every string over alphabet of length 0..max_len, as tuples of symbols."""
    for n in range(max_len + 1):
        yield from itertools.product(alphabet, repeat=n)


def ref_accepts(dfa: DFA, word) -> bool:
    """An independent run: the transition table by names, walked by hand."""
    table = dfa.transitions
    q = dfa.states[dfa.start]
    for a in word:
        q = table[(q, a)]
    return q in {dfa.states[i] for i in dfa.accepting}


def nerode_classes(dfa: DFA) -> int:
    """Myhill–Nerode by brute force: reachable states, grouped by which suffixes of length ≤ n they
    accept (two states of an n-state DFA that differ differ on a suffix shorter than n)."""
    table, acc = dfa.transitions, {dfa.states[i] for i in dfa.accepting}
    reach, frontier = {dfa.states[dfa.start]}, [dfa.states[dfa.start]]
    while frontier:
        q = frontier.pop()
        for a in dfa.alphabet:
            if table[(q, a)] not in reach:
                reach.add(table[(q, a)])
                frontier.append(table[(q, a)])
    suffixes = list(words(dfa.alphabet, dfa.n_states))

    def lands(q, w):
        for a in w:
            q = table[(q, a)]
        return q in acc

    return len({tuple(lands(q, w) for w in suffixes) for q in reach})


def rnn_answers(rnn, dfa: DFA, max_len: int) -> dict[tuple, bool]:
    """The RNN's answer for every string up to max_len, read off exact 0.0 / 1.0 outputs."""
    out = {}
    for n in range(max_len + 1):
        batch = list(itertools.product(range(dfa.n_symbols), repeat=n))
        with torch.no_grad():
            y, _ = rnn(torch.tensor(batch, dtype=torch.long).reshape(len(batch), n))
        final = y[:, -1]
        assert bool(((final == 0.0) | (final == 1.0)).all()), "RNN output is not exactly 0 or 1"
        for w, v in zip(batch, final.tolist()):
            out[tuple(dfa.alphabet[a] for a in w)] = v == 1.0
    return out


BUILDERS = {
    "parity": (parity(), lambda w: w.count("1") % 2 == 0),
    "div3": (divisible_by(3), lambda w: int("".join(w) or "0", 2) % 3 == 0),
    "div5": (divisible_by(5), lambda w: int("".join(w) or "0", 2) % 5 == 0),
    "div6": (divisible_by(6), lambda w: int("".join(w) or "0", 2) % 6 == 0),
    "contains abb": (contains("abb"), lambda w: "abb" in "".join(w)),
    "contains aba": (contains("aba"), lambda w: "aba" in "".join(w)),
}


@pytest.mark.parametrize("name", list(BUILDERS))
def test_builders_accept_what_they_say(name):
    dfa, predicate = BUILDERS[name]
    for w in words(dfa.alphabet, 10):
        assert dfa.accepts(w) == predicate(w) == ref_accepts(dfa, w), (name, w)


@pytest.mark.parametrize("name", list(BUILDERS))
def test_compiled_rnn_equals_each_builder_up_to_length_10(name):
    dfa, predicate = BUILDERS[name]
    got = rnn_answers(compile_dfa_to_relu_rnn(dfa), dfa, 10)
    assert len(got) == 2**11 - 1
    assert all(got[w] == predicate(w) for w in got)


def test_compiled_rnn_equals_20_random_dfas_up_to_length_10():
    for seed in range(28):  # 21 over {a, b} up to length 10, 7 over {a, b, c} up to length 7
        alphabet = ("a", "b", "c") if seed % 4 == 3 else ("a", "b")
        dfa = random_dfa(2 + seed % 9, seed=seed, alphabet=alphabet)
        max_len = 7 if len(alphabet) == 3 else 10
        rnn = compile_dfa_to_relu_rnn(dfa)
        got = rnn_answers(rnn, dfa, max_len)
        for w, v in got.items():
            assert v == ref_accepts(dfa, w), (seed, w)
        # The library's own verifier agrees and also sees the one-hot invariant.
        report = verify_rnn(dfa, rnn, max_len=max_len, n_random=2, random_len=500, seed=seed)
        assert report.ok and report.mismatches == 0 and report.hidden_one_hot


def test_rnn_weights_are_integers_and_the_shapes_are_n_m_plus_1():
    dfa = random_dfa(7, seed=3, alphabet=("a", "b", "c"))
    rnn = compile_dfa_to_relu_rnn(dfa)
    assert isinstance(rnn.rnn, torch.nn.RNN) and rnn.rnn.nonlinearity == "relu"
    H = 7 * 3 + 1
    assert rnn.rnn.weight_hh_l0.shape == (H, H) and rnn.rnn.weight_ih_l0.shape == (H, 3)
    for p in rnn.parameters():
        assert bool((p == p.round()).all())
        assert set(p.unique().tolist()) <= {-1.0, 0.0, 1.0}


def test_no_drift_on_strings_of_length_10_000():
    for seed, dtype in ((0, torch.float32), (1, torch.float64)):
        dfa = random_dfa(12, seed=seed)
        rnn = compile_dfa_to_relu_rnn(dfa, dtype)
        x = np.random.default_rng(seed).integers(0, 2, size=(3, 10_000))
        with torch.no_grad():
            y, hidden = rnn(torch.from_numpy(x))
        # Reference: a walk over the names, prefix by prefix.
        table, acc = dfa.transitions, {dfa.states[i] for i in dfa.accepting}
        for b in range(3):
            q = dfa.states[dfa.start]
            want = [q in acc]
            for a in x[b]:
                q = table[(q, dfa.alphabet[a])]
                want.append(q in acc)
            assert y[b].tolist() == [float(v) for v in want]  # exact, not approximately
        assert bool((hidden.sum(-1) == 1).all()) and bool(((hidden == 0) | (hidden == 1)).all())


def test_verify_can_fail():
    dfa = divisible_by(3)
    rnn = compile_dfa_to_relu_rnn(dfa)
    with torch.no_grad():
        rnn.readout.weight[0, 0] = 1.0 - rnn.readout.weight[0, 0]  # flip the answer of one unit
    report = verify_rnn(dfa, rnn, max_len=6, n_random=1, random_len=100)
    assert not report.ok and report.mismatches > 0 and report.first_mismatch is not None
    assert ref_accepts(dfa, tuple(report.first_mismatch)) != (rnn.accepts(dfa, report.first_mismatch))


def test_minimization_gives_the_known_sizes():
    assert divisible_by(3).minimize().n_states == 3
    assert divisible_by(5).minimize().n_states == 5
    assert parity().minimize().n_states == 2
    assert contains("abb").minimize().n_states == 4
    # Padding parity with redundant copies must not survive minimization.
    p = parity()
    doubled = DFA(("e0", "o0", "e1", "o1"), p.alphabet, ((0, 3), (1, 2), (2, 1), (3, 0)), 0, frozenset({0, 2}))
    assert doubled.minimize().n_states == 2


@pytest.mark.parametrize("k", [1, 2, 3, 4, 6, 7, 8, 12])
def test_minimal_size_of_divisibility_matches_brute_force(k):
    dfa = divisible_by(k)
    minimal = dfa.minimize()
    assert minimal.n_states == nerode_classes(dfa)
    for w in words(("0", "1"), 10):
        assert minimal.accepts(w) == dfa.accepts(w)


def test_minimize_random_dfas_against_brute_force():
    for seed in range(30):
        dfa = random_dfa(2 + seed % 8, seed=100 + seed)
        minimal = dfa.minimize()
        assert minimal.n_states == nerode_classes(dfa), seed
        assert minimal.unreachable() == []
        assert all(minimal.accepts(w) == ref_accepts(dfa, w) for w in words(dfa.alphabet, 9)), seed
        assert minimal.minimize() == minimal  # canonical: minimizing again changes nothing


def test_equivalence_and_counterexamples_against_enumeration():
    dfas = [random_dfa(n, seed=s, p_accept=0.3) for s in range(10) for n in (1, 2, 3)]
    dfas += [d.minimize() for d in dfas[:10]]
    for x, y in itertools.combinations(dfas, 2):
        differ = [w for w in words(("a", "b"), 7) if ref_accepts(x, w) != ref_accepts(y, w)]
        witness = x.counterexample(y)
        if witness is None:
            assert not differ
            assert x.equivalent(y)
        else:
            assert ref_accepts(x, tuple(witness)) != ref_accepts(y, tuple(witness))
            if differ:
                assert len(witness) == min(len(w) for w in differ)  # BFS: a shortest one


def test_product_and_complement():
    a, b = contains("ab"), contains("ba")
    for w in words(("a", "b"), 8):
        s = "".join(w)
        assert a.intersection(b).accepts(w) == ("ab" in s and "ba" in s)
        assert a.union(b).accepts(w) == ("ab" in s or "ba" in s)
        assert a.symmetric_difference(b).accepts(w) == (("ab" in s) != ("ba" in s))
        assert a.complement().accepts(w) == ("ab" not in s)
    # Alphabets matched by name, not position.
    swapped = DFA(a.states, ("b", "a"), tuple((row[1], row[0]) for row in a.delta), a.start, a.accepting)
    assert a.equivalent(swapped)
    with pytest.raises(UserError, match="different alphabets"):
        a.equivalent(parity())


def test_json_round_trip(tmp_path):
    dfa = random_dfa(6, seed=4, alphabet=("x", "y", "z"))
    path = save_dfa(dfa, tmp_path / "r.json")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        back = load_dfa(path)
    assert back == dfa
    assert json.loads(path.read_text())["transitions"]["q0"] == {a: dfa.run(a) for a in "xyz"}


GOOD = {
    "alphabet": ["a", "b"],
    "states": ["p", "q"],
    "start": "p",
    "accepting": ["q"],
    "transitions": {"p": {"a": "q", "b": "p"}, "q": {"a": "q", "b": "p"}},
}


def variant(**changes):
    data = json.loads(json.dumps(GOOD))
    data.update(changes)
    return data


BAD = {
    "missing transition": (
        variant(transitions={"p": {"a": "q"}, "q": {"a": "q", "b": "p"}}),
        ["missing transition", "'p'", "'b'"],
    ),
    "symbol outside": (
        variant(transitions={"p": {"a": "q", "b": "p", "c": "p"}, "q": {"a": "q", "b": "p"}}),
        ["'c'", "not in the alphabet"],
    ),
    "duplicate states": (variant(states=["p", "q", "p"]), ["duplicate state", "'p'"]),
    "duplicate symbols": (variant(alphabet=["a", "b", "a"]), ["duplicate symbol", "'a'"]),
    "unknown start": (variant(start="z"), ["start state", "'z'"]),
    "unknown target": (variant(transitions={"p": {"a": "z", "b": "p"}, "q": {"a": "q", "b": "p"}}), ["'z'"]),
    "missing key": ({k: v for k, v in GOOD.items() if k != "start"}, ["missing key", "'start'"]),
    "non-name accepting": (variant(accepting=[["q"]]), ["accepting state", "['q']"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_files_are_one_line_user_errors(case, tmp_path, capsys):
    data, names = BAD[case]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UserError) as err:
        load_dfa(path)
    for name in names:
        assert name in str(err.value)
    code, err_text = run_cli(["dfa", "compile", str(path)], capsys)
    assert_one_line_error(code, err_text, *names)


def test_a_max_len_too_large_to_enumerate_is_one_line(tmp_path, capsys):
    path = tmp_path / "good.json"
    path.write_text(json.dumps(GOOD))
    # 2**20000 has 6,021 digits, more than Python formats by default: the message must not try
    assert_one_line_error(
        *run_cli(["dfa", "check", str(path), "--max-len", "20000"], capsys),
        "--max-len 20000 means 2^20000 strings",
        "use --max-len 21 or less",
    )


def test_duplicate_json_keys_and_broken_json(tmp_path, capsys):
    path = tmp_path / "dup.json"
    path.write_text(
        '{"alphabet": ["a"], "states": ["p"], "start": "p", "accepting": [], "transitions": {"p": {"a": "p"}, "p": {"a": "p"}}}'
    )
    assert_one_line_error(*run_cli(["dfa", "check", str(path)], capsys), "duplicate key", "'p'")
    path.write_text('{"alphabet": [')
    assert_one_line_error(*run_cli(["dfa", "check", str(path)], capsys), "not valid JSON")
    assert_one_line_error(*run_cli(["dfa", "check", str(tmp_path / "absent.json")], capsys), "does not exist")


def test_unreachable_states_warn_but_work(tmp_path, capsys):
    data = variant(states=["p", "q", "lost"], transitions={**GOOD["transitions"], "lost": {"a": "p", "b": "lost"}})
    path = tmp_path / "u.json"
    path.write_text(json.dumps(data))
    with pytest.warns(UnreachableStatesWarning, match="lost"):
        load_dfa(path)
    code, err = run_cli(["dfa", "check", str(path), "--max-len", "6", "--random-len", "100"], capsys)
    assert code == 0
    assert err.startswith("nanolm: warning: ") and "'lost'" in err and len(err.splitlines()) == 1
    assert "Traceback" not in err


def run_cli(argv, capsys) -> tuple[int, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return exc.value.code, capsys.readouterr().err


def assert_one_line_error(code, stderr, *names):
    assert code == 2, stderr
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nanolm: error: "), stderr
    for name in names:
        assert name in lines[0], (name, stderr)


def test_cli_build_compile_check_minimize(tmp_path, capsys):
    path = tmp_path / "d6.json"
    assert run_cli(["dfa", "build", "divisible", "--k", "6", "-o", str(path)], capsys)[0] == 0
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["dfa", "compile", str(path), "--json"])
    sizes = json.loads(capsys.readouterr().out)
    assert (sizes["states"], sizes["hidden"], sizes["integer_valued"]) == (6, 13, True)
    with pytest.raises(SystemExit) as exc:
        main(["dfa", "check", str(path), "--max-len", "10", "--random", "2", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert exc.value.code == 0
    assert report["ok"] and report["exhaustive_strings"] == 2**11 - 1 and report["random_len"] == 10_000
    with pytest.raises(SystemExit):
        main(["dfa", "minimize", str(path), "--json", "-o", str(tmp_path / "min.json")])
    out = json.loads(capsys.readouterr().out)
    assert (out["states_before"], out["states_after"]) == (6, 4)
    assert load_dfa(tmp_path / "min.json").equivalent(load_dfa(path))
    with pytest.raises(SystemExit) as exc:
        main(["dfa", "check", str(path), "--minimize", "--max-len", "8", "--json"])
    assert exc.value.code == 0 and json.loads(capsys.readouterr().out)["hidden"] == 4 * 2 + 1


def test_cli_equiv_exit_codes(tmp_path, capsys):
    save_dfa(divisible_by(3), tmp_path / "a.json")
    save_dfa(divisible_by(6), tmp_path / "b.json")
    save_dfa(divisible_by(3).minimize(), tmp_path / "c.json")
    assert run_cli(["dfa", "equiv", str(tmp_path / "a.json"), str(tmp_path / "c.json")], capsys)[0] == 0
    with pytest.raises(SystemExit) as exc:
        main(["dfa", "equiv", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert exc.value.code == 1 and out["counterexample"] == "11"  # 3 is divisible by 3, not by 6


def test_real_command_line_error_has_no_traceback(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(variant(transitions={"p": {"a": "q"}, "q": {"a": "q", "b": "p"}})))
    out = subprocess.run([sys.executable, "-m", "nanolm", "dfa", "check", str(path)], capture_output=True, text=True, timeout=120)
    assert_one_line_error(out.returncode, out.stderr, "missing transition")


def moore_classes(dfa: DFA) -> int:
    """Minimal size by Moore's refinement (an algorithm independent of the Hopcroft code under test):
    split states by (class, classes of successors) until nothing changes, over the reachable states."""
    reach, frontier = {dfa.start}, [dfa.start]
    while frontier:
        for t in dfa.delta[frontier.pop()]:
            if t not in reach:
                reach.add(t)
                frontier.append(t)
    cls = {q: int(q in dfa.accepting) for q in reach}
    while True:
        signature = {q: (cls[q], *(cls[t] for t in dfa.delta[q])) for q in reach}
        ids = {s: i for i, s in enumerate(sorted(set(signature.values())))}
        refined = {q: ids[signature[q]] for q in reach}
        if len(ids) == len(set(cls.values())):
            return len(ids)
        cls = refined


def test_minimize_large_redundant_dfas_against_moore():
    """Two copies of a random DFA, each transition going to either copy of its target: every state
    has a twin, so at least half must merge; Hopcroft must find exactly Moore's classes."""
    rng = np.random.default_rng(0)
    for n in (50, 200, 400):
        base = random_dfa(n, seed=n, alphabet=("a", "b", "c"), p_accept=0.2)
        delta = tuple(tuple(int(t) + n * int(rng.integers(2)) for t in base.delta[q % n]) for q in range(2 * n))
        twins = DFA(
            tuple(f"q{i}" for i in range(2 * n)),
            base.alphabet,
            delta,
            0,
            frozenset(q for q in range(2 * n) if q % n in base.accepting),
        )
        minimal = twins.minimize()
        assert minimal.n_states == moore_classes(twins) == moore_classes(base) <= n
        assert minimal.equivalent(base)


def test_output_paths_are_checked_before_any_work(tmp_path, capsys):
    (tmp_path / "adir").mkdir()
    assert_one_line_error(
        *run_cli(["dfa", "build", "parity", "-o", str(tmp_path / "nodir" / "x.json")], capsys), "--out", "does not exist"
    )
    assert_one_line_error(
        *run_cli(["dfa", "build", "parity", "-o", str(tmp_path / "adir")], capsys), "--out", "is a folder", "adir/dfa.json"
    )
    save_dfa(parity(), tmp_path / "p.json")
    assert_one_line_error(
        *run_cli(["dfa", "compile", str(tmp_path / "p.json"), "-o", str(tmp_path / "adir")], capsys), "is a folder"
    )
    assert_one_line_error(*run_cli(["dyck", "experiment", "--plot", str(tmp_path / "adir")], capsys), "--plot")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "p.json"] and not any((tmp_path / "adir").iterdir())


def test_written_files_get_the_umask_mode_not_mkstemps_0600(tmp_path):
    import os

    umask = os.umask(0)
    os.umask(umask)
    save_dfa(parity(), tmp_path / "p.json")
    assert (tmp_path / "p.json").stat().st_mode & 0o777 == 0o666 & ~umask  # 0o644 under the usual 022
    (tmp_path / "p.json").chmod(0o640)
    save_dfa(parity(), tmp_path / "p.json")  # an existing file keeps its own mode
    assert (tmp_path / "p.json").stat().st_mode & 0o777 == 0o640


def test_negative_seeds_and_sizes_too_large_for_memory_are_one_line(tmp_path, capsys):
    assert_one_line_error(*run_cli(["dfa", "build", "random", "--seed", "-1", "-o", str(tmp_path / "r.json")], capsys), "--seed")
    n = 9000  # a cycle (every state reachable): H = 18,001 units, W_hh alone 2.4 GiB in float64
    cycle = DFA(tuple(f"q{i}" for i in range(n)), ("a", "b"), tuple(((i + 1) % n, 0) for i in range(n)), 0, frozenset({0}))
    save_dfa(cycle, tmp_path / "big.json")
    assert_one_line_error(*run_cli(["dfa", "compile", str(tmp_path / "big.json")], capsys), "18,001 units", "--minimize")
    save_dfa(parity(), tmp_path / "p.json")
    assert_one_line_error(
        *run_cli(["dfa", "check", str(tmp_path / "p.json"), "--random-len", "100000000"], capsys),
        "--random-len 100,000,000",
        "or less",
    )


def test_parity_alphabet_counts_the_one_and_divisible_refuses_an_alphabet(tmp_path, capsys):
    assert run_cli(["dfa", "build", "parity", "--alphabet", "10", "-o", str(tmp_path / "p.json")], capsys)[0] == 0
    assert load_dfa(tmp_path / "p.json").equivalent(parity())
    assert_one_line_error(
        *run_cli(["dfa", "build", "divisible", "--alphabet", "xy", "-o", str(tmp_path / "d.json")], capsys),
        "does not apply to divisible",
    )


def test_huge_random_dfas_and_multi_character_symbols_are_refused(tmp_path, capfd):
    code, err = run_cli(["dfa", "build", "random", "--states", "100000000", "-o", str(tmp_path / "r.json")], capfd)
    assert code == 2 and len(err.splitlines()) == 1 and "--states 2,000,000 or less" in err, err
    assert not (tmp_path / "r.json").exists()
    path = tmp_path / "multi.json"
    path.write_text(
        json.dumps(
            {
                "alphabet": ["ab", "1"],
                "states": ["s"],
                "start": "s",
                "accepting": ["s"],
                "transitions": {"s": {"ab": "s", "1": "s"}},
            }
        )
    )
    code, err = run_cli(["dfa", "compile", str(path)], capfd)
    assert code == 2 and "symbol 'ab' in 'alphabet' is 2 characters" in err and len(err.splitlines()) == 1, err


def test_compile_and_minimize_say_where_they_wrote_and_nothing_when_they_did_not(tmp_path, capsys):
    path = tmp_path / "d6.json"
    assert run_cli(["dfa", "build", "divisible", "--k", "6", "-o", str(path)], capsys)[0] == 0
    for argv, written in (
        (["dfa", "compile", str(path)], None),
        (["dfa", "minimize", str(path)], None),
        (["dfa", "compile", str(path), "-o", str(tmp_path / "rnn.safetensors")], "rnn.safetensors"),
        (["dfa", "minimize", str(path), "-o", str(tmp_path / "min.json")], "min.json"),
    ):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main(argv)
        out = capsys.readouterr().out
        assert exc.value.code == 0
        flat = "".join(out.splitlines())  # a long path wraps at the terminal's width
        if written is None:
            assert "written to" not in flat, out
        else:
            assert f"written to {tmp_path / written}" in flat and (tmp_path / written).is_file(), out
