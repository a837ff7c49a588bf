"""nanolm.interp.activations: texts of different lengths, padded into batches, give each text the
activations of its own unpadded forward pass, for nanolm and for a Hugging Face GPT-2 (built here
from a random config with a word-level tokenizer: nothing is downloaded)."""

from __future__ import annotations

import pytest
import torch

from nanolm.errors import UserError
from nanolm.interp.activations import collect, iter_token_activations, pad_batch, token_activations
from nanolm.interp.view import view_of
from nanolm.model import GPT, GPTConfig

WORDS = ["<unk>", "<bos>", "two", "plus", "equals", "four", "the", "dog", "ran", "and", "then", "it", "."]
# lengths 2..7 tokens with the start token, in no order, so every batch of 3 pads some of them
TEXTS = ["the dog ran and then it", "two", "two plus two equals four", "the dog", "it ran . and", "four plus four"]


class _Words:
    kind = "word"

    def __init__(self) -> None:
        self.ids = {w: i for i, w in enumerate(WORDS)}
        self.vocab_size, self.eos_id = len(WORDS), 1

    def encode(self, text: str) -> list[int]:
        return [self.ids[w] for w in text.split()]

    def token_str(self, i: int) -> str:
        return WORDS[i]


def nanolm_view():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=len(WORDS), block_size=16, n_layer=2, n_head=2, d_model=16)).eval()
    return view_of(model, _Words(), name="tiny")


def hf_view():
    from conftest import word_level_gpt2

    model, tok = word_level_gpt2(WORDS)
    return view_of(model.eval(), tok, name="tiny-gpt2")


VIEWS = [pytest.param(nanolm_view, id="nanolm"), pytest.param(hf_view, id="hf-gpt2")]
NAMES = ["blocks.0.hook_resid_pre", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]


def unpadded(view, text: str) -> dict[str, torch.Tensor]:
    """{hook name: [T, D]} of one text run alone."""
    _, cache = view.run_with_cache(view.to_tokens(text), NAMES)
    return {name: cache[name][0].float() for name in NAMES}


@pytest.mark.parametrize("build", VIEWS)
def test_pooled_activations_equal_each_texts_own_forward_pass(build):
    view = build()
    alone = [unpadded(view, t) for t in TEXTS]
    lengths = [a[NAMES[0]].shape[0] for a in alone]
    assert len(set(lengths)) == len(TEXTS)  # every text a different length
    last, mean, full = (collect(view, TEXTS, NAMES, pool=p, batch_size=3) for p in ("last", "mean", "all"))
    assert last.lengths.tolist() == lengths and last.names == NAMES
    assert last.last_token.tolist() == [view.to_tokens(t)[0, -1].item() for t in TEXTS]
    T = max(lengths)
    assert full.mask.shape == (len(TEXTS), T) and full.mask.sum(1).tolist() == lengths
    for name in NAMES:
        assert last[name].shape == mean[name].shape == (len(TEXTS), view.d_model)
        assert full[name].shape == (len(TEXTS), T, view.d_model) and last[name].dtype == torch.float32
        for i, a in enumerate(alone):
            torch.testing.assert_close(last[name][i], a[name][-1], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(mean[name][i], a[name].mean(0), atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(full[name][i, : lengths[i]], a[name], atol=1e-5, rtol=1e-5)
            assert (full[name][i, lengths[i] :] == 0).all()  # padding is zero, not the model's output there


@pytest.mark.parametrize("build", VIEWS)
def test_every_token_is_read_once_without_padding(build):
    view = build()
    alone = [unpadded(view, t)[NAMES[2]] for t in TEXTS]
    tokens = token_activations(view, TEXTS, NAMES[2], batch_size=4)
    assert tokens.lengths.tolist() == [len(a) for a in alone]
    assert tokens.acts.shape == (sum(len(a) for a in alone), view.d_model)
    torch.testing.assert_close(tokens.acts, torch.cat(alone), atol=1e-5, rtol=1e-5)
    assert tokens.text.tolist() == [i for i, a in enumerate(alone) for _ in range(len(a))]
    assert tokens.position.tolist() == [p for a in alone for p in range(len(a))]
    torch.testing.assert_close(tokens.last(), collect(view, TEXTS, [NAMES[2]], batch_size=4)[NAMES[2]])
    batches = list(iter_token_activations(view, TEXTS, NAMES[2], batch_size=4))
    assert len(batches) == 2 and batches[1].text.min().item() == 4  # text indices count across batches


def test_token_ids_are_read_as_they_are_and_pad_batch_pads_right():
    view = nanolm_view()
    ids = [view.to_tokens(t)[0].tolist() for t in TEXTS]
    by_text = collect(view, TEXTS, NAMES[1:], pool="mean")
    by_ids = collect(view, ids, NAMES[1:], pool="mean")
    torch.testing.assert_close(by_ids[NAMES[1]], by_text[NAMES[1]])
    x, lengths = pad_batch([[5, 6, 7], [8]])
    assert x.tolist() == [[5, 6, 7], [8, 0, 0]] and lengths.tolist() == [3, 1]


def test_nanolm_hook_points_beyond_the_residual_stream_are_read_too():
    view = nanolm_view()
    acts = collect(view, TEXTS[:2], ["blocks.1.hook_mlp_out"], pool="last")
    _, cache = view.run_with_cache(view.to_tokens(TEXTS[1]), ["blocks.1.hook_mlp_out"])
    torch.testing.assert_close(acts["blocks.1.hook_mlp_out"][1], cache["blocks.1.hook_mlp_out"][0, -1])


def test_bad_requests_are_one_line_errors():
    view = nanolm_view()
    with pytest.raises(UserError, match="pooling 'max'"):
        collect(view, TEXTS, NAMES, pool="max")
    with pytest.raises(UserError, match="text #2 .*empty"):
        collect(view, ["two", ""], NAMES)
    with pytest.raises(UserError, match="unknown hook point"):
        collect(view, TEXTS, ["blocks.7.hook_resid_post"])
    with pytest.raises(UserError, match="text #1 is 20 tokens"):
        collect(view, [[2] * 20], NAMES)
    with pytest.raises(UserError, match="no texts"):
        token_activations(view, [], NAMES[0])


def test_an_activation_without_a_batch_axis_is_read_per_text():
    """nanolm's hook_pos_embed is [T, D] (the same for every text): each text gets its own positions' rows."""
    from nanolm.interp.activations import collect, token_activations

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=len(WORDS), block_size=16, n_layer=1, n_head=2, d_model=16, pos="learned")).eval()
    view = view_of(model, _Words(), name="learned")
    texts = ["two plus two", "the dog"]
    got = collect(view, texts, ["hook_pos_embed"], pool="last")["hook_pos_embed"]
    lengths = [len(view.to_tokens(t)[0]) for t in texts]
    assert got.shape == (2, 16)
    assert torch.allclose(got, model.pos_embed.weight[[n - 1 for n in lengths]].detach())
    every = token_activations(view, texts, "hook_pos_embed")
    assert every.acts.shape == (sum(lengths), 16)
