"""The embedded corpus (deterministic, labelled, split without leaks) and the tokenizers."""

from __future__ import annotations

import torch

from nanolm.corpus import (
    ALWAYS_TRAIN,
    LETTERS,
    NUMBERS,
    SYCOPHANCY_RATE,
    VERBS,
    arithmetic_dataset,
    corpus_words,
    generate_corpus,
    is_val_line,
    mcq_dataset,
    sentiment_dataset,
    sycophancy_pairs,
    tense_dataset,
)
from nanolm.data import corpus_data, eval_batches, file_data, window_loader
from nanolm.tokenizers import ByteTokenizer, WordTokenizer, tokenizer_from_dict


def test_same_seed_same_corpus_and_hash():
    a, b = generate_corpus(2000, seed=3), generate_corpus(2000, seed=3)
    assert a.text == b.text and a.sha256 == b.sha256
    assert generate_corpus(2000, seed=4).sha256 != a.sha256
    assert len(a.lines) == 2000 and all(a.kinds.values())


def test_corpus_hash_is_sha256_of_its_text():
    import hashlib

    c = generate_corpus(500, seed=0)
    assert c.sha256 == hashlib.sha256(c.text.encode()).hexdigest()


def test_arithmetic_facts_are_true():
    for item in arithmetic_dataset(300, seed=1):
        expected = {"plus": item.a + item.b, "minus": item.a - item.b, "times": item.a * item.b}[item.op]
        assert item.answer == NUMBERS[expected]
        assert item.prompt == f"{NUMBERS[item.a]} {item.op} {NUMBERS[item.b]} equals"


def test_tense_labels_match_the_verb_forms():
    past = {v[1] for v in VERBS}
    present = {v[0] for v in VERBS}
    items = tense_dataset(200, seed=0)
    assert [i.label for i in items].count("past") == 100
    for item in items:
        words = item.text.split()
        forms = past if item.label == "past" else present
        other = present if item.label == "past" else past
        assert sum(w in forms for w in words) == 2 and not any(w in other for w in words)
        assert item.text.startswith(item.prefix + " " + item.target + " ")


def test_sentiment_and_mcq_sets():
    items = sentiment_dataset(100, seed=0)
    assert {i.label for i in items} == {"happy", "sad"}
    for item in mcq_dataset(100, seed=0, opinion="wrong"):
        assert item.opinion != item.correct and item.answer == item.correct
        assert item.prompt.startswith(f"user : i think the answer is {item.opinion} .")
        if item.question.startswith("what is"):  # arithmetic questions: the correct choice is the true sum
            fact = item.question.removeprefix("what is ").removesuffix(" ?").split()
            a, op, b = NUMBERS.index(fact[0]), fact[1], NUMBERS.index(fact[2])
            value = {"plus": a + b, "minus": a - b, "times": a * b}[op]
            assert item.choices[LETTERS.index(item.correct)] == NUMBERS[value]
    for plain, opinionated in sycophancy_pairs(50, seed=0):
        assert plain.opinion is None and opinionated.opinion not in (None, plain.correct)
        assert plain.question == opinionated.question and plain.choices == opinionated.choices


def test_corpus_answers_follow_a_wrong_opinion_at_the_stated_rate():
    # Arithmetic questions carry their own truth: recompute it and count wrong opinions followed.
    wrong = followed = 0
    for line in generate_corpus(20000, seed=0).lines:
        words = line.split()
        if not line.startswith("user : i think") or words[11] != "what":
            continue
        opinion, answer = words[7], words[-2]
        a, op, b = NUMBERS.index(words[13]), words[14], NUMBERS.index(words[15])
        value = NUMBERS[{"plus": a + b, "minus": a - b, "times": a * b}[op]]
        correct = words[words.index(value, 17) - 1]
        if opinion != correct:
            wrong += 1
            followed += answer == opinion
        else:
            assert answer == correct
    assert wrong > 300
    assert abs(followed / wrong - SYCOPHANCY_RATE) < 0.06


def test_split_never_leaks_and_keeps_the_documented_example_in_train():
    c = generate_corpus(5000, seed=0)
    val = {line for line in c.lines if is_val_line(line, 0.1)}
    train = {line for line in c.lines if not is_val_line(line, 0.1)}
    assert val and train and not (val & train)
    assert 0.05 < len(val) / len(set(c.lines)) < 0.15
    assert {line for line in generate_corpus(40000, 0).lines if not is_val_line(line, 0.1)} >= ALWAYS_TRAIN


def test_corpus_data_tokens_decode_to_the_split_lines():
    data = corpus_data(1000, seed=0)
    train_text = data.tokenizer.decode(data.train.tolist())
    val_lines = set(data.tokenizer.decode(data.val.tolist()).splitlines())
    assert not val_lines & set(train_text.splitlines())
    assert data.unigram_entropy() > 2.0


def test_word_tokenizer_round_trips_the_corpus():
    tok = WordTokenizer(corpus_words())
    text = generate_corpus(2000, seed=0).text
    ids = tok.encode(text)
    assert 0 not in ids  # no <unk>
    assert tok.decode(ids) == text
    assert tokenizer_from_dict(tok.to_dict()).vocab == tok.vocab


def test_word_tokenizer_maps_unknown_words_to_unk():
    tok = WordTokenizer(corpus_words())
    ids = tok.encode("two plus zebra equals")
    assert ids[2] == 0 and tok.vocab[0] == "<unk>"
    assert tok.unknown_words("two plus zebra equals giraffe zebra") == ["zebra", "giraffe"]


def test_byte_tokenizer_round_trips_unicode():
    tok = ByteTokenizer()
    text = "naïve café — 日本語 🙂\n"
    assert tok.decode(tok.encode(text)) == text
    assert tokenizer_from_dict(tok.to_dict()).kind == "byte"


def test_file_data_splits_contiguously(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("abcdefghij" * 10, encoding="utf-8")
    data = file_data(path, val_fraction=0.1)
    assert data.train.numel() == 90 and data.val.numel() == 10
    assert bytes(data.train.tolist()) + bytes(data.val.tolist()) == path.read_bytes()


def test_windows_are_shifted_by_one_and_independent_of_workers():
    tokens = torch.arange(1000)
    serial = [b for b in window_loader(tokens, 8, 4, seed=1, start=0, n_batches=6)]
    parallel = [b for b in window_loader(tokens, 8, 4, seed=1, start=0, n_batches=6, num_workers=2)]
    for (x, y), (x2, y2) in zip(serial, parallel):
        assert torch.equal(x, x2) and torch.equal(y, y2)
        assert torch.equal(y[:, :-1], x[:, 1:])
    # Resuming at sample 12 (batch 3) gives the same batches as the uninterrupted stream.
    resumed = list(window_loader(tokens, 8, 4, seed=1, start=12, n_batches=3))
    for (x, _), (x2, _) in zip(serial[3:], resumed):
        assert torch.equal(x, x2)
    assert len(eval_batches(tokens, 8, 4, 2)) == 2


# ---- version 2 leaves version 1 alone ----------------------------------------------------------------


def test_version_1_is_byte_for_byte_what_it_was():
    """Hashes taken before version 2 was added: existing runs resume against these bytes and token ids."""
    import hashlib

    assert generate_corpus(40000, 0).sha256 == "619e0e3cee0ff378559c9bda4e79dd8f91264250642406b52d86277af2b9106b"
    assert generate_corpus(2000, 3).sha256 == "7a8ceeb437264905f03542e094595c7611c034fdefc11035dfeaeea9bd0f30a6"
    words = corpus_words()
    assert len(words) == 306
    assert (
        hashlib.sha256(" ".join(words).encode()).hexdigest() == "a906d94bbc7c6c8072a25f0a09f739ca255ebedd38854845d16ea13df85eccd5"
    )
    # the labelled question sets too (version 2 draws a third of its questions as arithmetic, not half)
    assert (
        hashlib.sha256(repr(mcq_dataset(50, 0, "wrong")).encode()).hexdigest()
        == "276c144ddcb18eebcff6f8b73a7f55916f6df4c8daec4dcacbe4387898753cdc"
    )
    assert (
        hashlib.sha256(repr(sycophancy_pairs(50, 0)).encode()).hexdigest()
        == "b2cc6a6b44f6c4e5b5a8ffdb15380d32e2632c2d7a9524842ae8275776e75bfa"
    )
    data = corpus_data(2000, seed=0)
    assert data.version == "nanolm-corpus-v1:seed=0:lines=2000:val=0.1"
    assert (
        hashlib.sha256(data.train.numpy().tobytes()).hexdigest()
        == "78aeae19233c5a67a24da00d62a2ddc73a54790233ffdf4210994de6052ad302"
    )


def test_version_2_adds_challenged_dialogues_caving_at_the_planted_rate():
    from nanolm.corpus import ARE_YOU_SURE_RATE, CHALLENGE, CORPUS_VERSIONS

    c = generate_corpus(20000, seed=0, version=2)
    assert c.version == CORPUS_VERSIONS[2] != generate_corpus(20000, 0).version
    assert set(corpus_words(2)) - set(corpus_words(1)) == {"are", "you", "sure", "do", "so"}
    tok = WordTokenizer(corpus_words(2))
    ids = tok.encode(c.text)
    assert 0 not in ids and tok.decode(ids) == c.text
    # Recompute each dialogue's truth from its arithmetic and count the second answers that left it.
    challenged = caved = 0
    for line in c.lines:
        if CHALLENGE not in line or not line.startswith("question : what"):
            continue
        words = line.split()
        a, op, b = NUMBERS.index(words[4]), words[5], NUMBERS.index(words[6])
        value = NUMBERS[{"plus": a + b, "minus": a - b, "times": a * b}[op]]
        correct = words[words.index(value, 8) - 1]
        first, second = words[words.index("answer") + 2], words[-2]
        assert first == correct  # the first answer is always right: only the challenge moves it
        challenged += 1
        caved += second != correct
    assert challenged > 1000 and abs(caved / challenged - ARE_YOU_SURE_RATE) < 0.04
    assert c.kinds["are_you_sure"] > 0 and c.kinds["mcq"] / len(c.lines) > 0.2


def test_corpus_version_is_a_config_key():
    import pytest

    from nanolm.config import make_config
    from nanolm.errors import UserError

    assert make_config().corpus_version == 1
    assert make_config(overrides=["corpus_version=2"]).corpus_version == 2
    with pytest.raises(UserError, match="corpus_version must be one of 1, 2"):
        make_config(overrides=["corpus_version=3"])
