"""The tuned lens: identity at init, lower KL than the logit lens on held-out tokens at every layer
but the last of a trained nanolm, saved and loaded without pickle."""

from __future__ import annotations

import pytest
import torch

from nanolm.errors import UserError
from nanolm.interp.lens import layer_logits
from nanolm.interp.tuned_lens import TunedLens, evaluate_lenses, lens_data, lens_evaluation_figure, train_tuned_lens
from nanolm.interp.view import load_view
from nanolm.plots import save_figure


def test_an_untrained_tuned_lens_is_the_logit_lens(trained_run):
    view = load_view(trained_run)
    tokens = torch.randint(0, view.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    _, resid = view.residual_stack(tokens)
    identity = TunedLens(view.d_model, view.n_layers)
    torch.testing.assert_close(layer_logits(view, resid, tuned=identity), layer_logits(view, resid))


def test_tuned_lens_beats_the_logit_lens_at_every_layer_but_the_last(trained_run, tmp_path):
    view = load_view(trained_run)
    data = lens_data(view)
    trained = train_tuned_lens(view, data, steps=150, out=tmp_path / "lens")
    assert trained.last_loss < trained.first_loss
    assert all(p.requires_grad for p in view.model.parameters())  # the model is left as it was
    lens = TunedLens.load(tmp_path / "lens", view)
    ev = evaluate_lenses(view, lens, data, batches=4)  # the run's val split: tokens the lens never saw
    assert ev.layers == ["embed", "0", "1"]
    for layer, logit_kl, tuned_kl in zip(ev.layers[:-1], ev.logit_lens_kl, ev.tuned_lens_kl):
        assert tuned_kl < logit_kl, layer
    # the last layer is the output itself: KL 0 up to float32 rounding
    assert ev.logit_lens_kl[-1] == pytest.approx(0.0, abs=1e-4) and ev.tuned_lens_kl[-1] == pytest.approx(0.0, abs=1e-4)
    assert ev.logit_lens_kl[0] > 10 * abs(ev.logit_lens_kl[-1])
    ax = lens_evaluation_figure(ev).axes[0]
    assert [list(line.get_ydata()) for line in ax.get_lines()] == [ev.logit_lens_kl, ev.tuned_lens_kl]
    assert [t.get_text() for t in ax.get_xticklabels()] == ev.layers
    assert save_figure(lens_evaluation_figure(ev), tmp_path / "kl.png").stat().st_size > 1000


def test_loading_a_missing_or_mismatched_lens_names_the_problem(trained_run, tmp_path):
    view = load_view(trained_run)
    with pytest.raises(UserError, match="no tuned lens in"):
        TunedLens.load(tmp_path / "nothing", view)
    TunedLens(view.d_model + 1, view.n_layers).save(tmp_path / "other", {})
    with pytest.raises(UserError, match="retrain it"):
        TunedLens.load(tmp_path / "other", view)


def test_a_lens_saved_for_one_model_is_refused_for_another_of_the_same_shape(tmp_path):
    from nanolm.interp.tuned_lens import unembed_fingerprint
    from nanolm.interp.view import view_of
    from nanolm.model import GPT, GPTConfig

    cfg = GPTConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, d_model=16)
    torch.manual_seed(0)
    a = view_of(GPT(cfg), name="a")
    torch.manual_seed(1)
    b = view_of(GPT(cfg), name="a")  # the same name, other weights
    TunedLens(16, 2).save(tmp_path, {"model": "a", "unembed_fingerprint": unembed_fingerprint(a)})
    assert TunedLens.load(tmp_path, a).n_layers == 2
    with pytest.raises(UserError, match="trained on another model"):
        TunedLens.load(tmp_path, b)
    # a UserError, as on Hugging Face views
    with pytest.raises(UserError, match="unknown hook point"), a.hooks({"blocks.9.hook_resid_post": lambda x: x}):
        pass
