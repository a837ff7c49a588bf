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


def test_the_evaluation_plot_starts_at_zero_kl_and_the_last_layers_ratio_is_not_a_number():
    """KL >= 0: the axis has no negative side; the last layer is the output itself (0/0), shown as no ratio."""
    from nanolm.interp.tuned_lens import LensEvaluation

    ev = LensEvaluation(["embed", "0", "1"], [4.0, 0.5, 3e-8], [1.0, 0.25, 2e-8], 256, "val")
    assert ev.ratios[:2] == [pytest.approx(0.25), pytest.approx(0.5)] and ev.ratios[-1] is None
    assert ev.to_dict()["ratios"][-1] is None
    assert LensEvaluation(["embed", "0"], [0.0, 0.0], [0.1, 0.0], 8, "val").ratios == [None, None]
    ax = lens_evaluation_figure(ev).axes[0]
    bottom, top = ax.get_ylim()
    assert bottom == 0.0 and top >= 4.0 and ax.get_yscale() == "symlog"
    assert all(t >= 0 for t in ax.get_yticks() if bottom <= t <= top)


def _saved_lens(folder):
    from nanolm.interp.view import view_of
    from nanolm.model import GPT, GPTConfig

    torch.manual_seed(0)
    view = view_of(GPT(GPTConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, d_model=16)), name="m")
    TunedLens(16, 2).save(folder, {"model": "m"})
    return view


@pytest.mark.parametrize(
    "damage,message",
    [
        (
            lambda f: (f / "translators.safetensors").write_bytes((f / "translators.safetensors").read_bytes()[:300]),
            "translators.safetensors cannot be read as safetensors",
        ),
        (lambda f: (f / "translators.safetensors").write_bytes(b""), "translators.safetensors cannot be read"),
        (
            lambda f: (f / "tuned_lens.json").write_text((f / "tuned_lens.json").read_text()[:20]),
            "tuned_lens.json is not valid JSON",
        ),
        (lambda f: (f / "tuned_lens.json").write_text('{"d_model": 16}'), "tuned_lens.json does not describe a tuned lens"),
        (lambda f: (f / "tuned_lens.json").write_text('{"d_model": 16, "n_layers": 1}'), "1 layers; this model has"),
        (
            lambda f: (f / "translators.safetensors").write_bytes(_weights_of(TunedLens(16, 1))),
            "translators.safetensors disagrees with its config: it has no tensor translators.1.weight",
        ),
    ],
)
def test_a_damaged_lens_is_one_line_naming_the_file_and_the_fix(tmp_path, damage, message):
    view = _saved_lens(tmp_path)
    damage(tmp_path)
    with pytest.raises(UserError, match=message) as e:
        TunedLens.load(tmp_path, view)
    assert "nanolm lens train" in str(e.value) and "\n" not in str(e.value)


def _weights_of(lens: TunedLens) -> bytes:
    from safetensors.torch import save

    return save({k: v.contiguous() for k, v in lens.state_dict().items()})


def test_training_refuses_a_folder_it_cannot_write_before_it_trains(tmp_path, monkeypatch):
    import os

    from nanolm.interp.tuned_lens import LensData

    view = _saved_lens(tmp_path / "lens")  # any view: training never starts
    data = LensData(torch.arange(200) % 20, torch.arange(50) % 20, "ids")
    steps = []
    (tmp_path / "locked").mkdir()
    os.chmod(tmp_path / "locked", 0o555)
    # root writes anywhere: make os.access honour the mode bits, as it does for every other user
    monkeypatch.setattr(os, "access", lambda p, mode: bool(os.stat(p).st_mode & 0o200) if mode == os.W_OK else True)
    try:
        for out, message in (
            (tmp_path / "locked", "the folder is read-only"),
            (tmp_path / "locked" / "new" / "lens", "locked is not a writable folder"),
        ):
            with pytest.raises(UserError, match=message):
                train_tuned_lens(view, data, steps=3, out=out, on_step=lambda s, _loss: steps.append(s))
    finally:
        os.chmod(tmp_path / "locked", 0o755)
    assert steps == []  # refused before the first step
    assert not (tmp_path / "locked" / "new").exists()
    assert train_tuned_lens(view, data, steps=3, out=tmp_path / "fresh" / "lens").folder.is_dir()
