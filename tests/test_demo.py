"""The demo's arithmetic check against planted answers: it counts exactly the facts a model gets right,
reads each prompt at a line's start, and names what the model has not learned."""

from __future__ import annotations

import torch

from nanolm.corpus import arithmetic_facts, corpus_words
from nanolm.demo import check_arithmetic
from nanolm.tokenizers import WordTokenizer


class PlantedModel(torch.nn.Module):
    """Answers the first `n_right` facts right and the others with "zero" (or "one" where zero is right);
    records what it was asked."""

    def __init__(self, tok: WordTokenizer, n_right: int) -> None:
        super().__init__()
        self.tok, self.seen = tok, []
        self.weight = torch.nn.Parameter(torch.zeros(1))  # a device to read
        facts = arithmetic_facts()
        self.answer = {}
        for i, f in enumerate(facts):
            wrong = "one" if f.answer == "zero" else "zero"
            self.answer[tuple(tok.encode(f.prompt))] = tok.encode(f.answer if i < n_right else wrong)[0]

    def forward(self, x: torch.Tensor):
        self.seen.append(x.clone())
        logits = torch.zeros(x.shape[0], x.shape[1], self.tok.vocab_size)
        for b, row in enumerate(x.tolist()):
            logits[b, -1, self.answer[tuple(row[1:])]] = 1.0
        return logits, None


def test_counts_exactly_the_planted_right_answers():
    tok = WordTokenizer(corpus_words())
    facts = arithmetic_facts()
    two_plus_two = next(i for i, f in enumerate(facts) if f.prompt == "two plus two equals")
    for n_right in (0, two_plus_two, two_plus_two + 1, len(facts)):
        model = PlantedModel(tok, n_right)
        check = check_arithmetic(model, tok)
        assert (check.facts, check.right) == (217, n_right)
        assert check.accuracy == n_right / 217
        assert check.example[:2] == ("two plus two equals", "four")
        assert (check.example[2] == "four") == (two_plus_two < n_right)
        assert len(check.wrong_examples) == min(5, 217 - n_right)
        assert all(want != got for _, want, got in check.wrong_examples)
        [x] = model.seen
        assert (x[:, 0] == tok.eos_id).all()  # every prompt read after <eos>, as training lines are
