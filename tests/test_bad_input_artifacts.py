"""Contradicting files (hostile input, class 7): a saved artifact whose config and tensors disagree (an SAE, a reward
model, a tuned lens, a checkpoint) is refused in one line naming both numbers, exit 2, the folder as it was; and
a config edited to an enormous size is refused from the safetensors header, before anything is built at that size.

Each folder here is a real one, saved by nanolm, then contradicted by hand the way a user would: one number in
the JSON changed, or the weights of another training copied in."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from bad_input import assert_user_error, in_process, run_of, snapshot
from nanolm.errors import UserError

D_MODEL = 32  # the tiny runs' width (bad_input.TINY)


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


# ---- the shared check ------------------------------------------------------------------------------------------


def test_the_first_disagreement_names_both_shapes_then_missing_then_extra():
    from nanolm.tensorfile import first_disagreement

    expected = {"W": (128, 512), "b": (512,)}
    assert first_disagreement({"W": (128, 512), "b": (512,)}, expected, "cfg") is None
    assert first_disagreement({"W": (64, 512), "b": (512,)}, expected, "cfg") == "W is 64 × 512 where cfg makes it 128 × 512"
    # a wrong shape is named before a missing tensor, a missing tensor before an extra one
    assert first_disagreement({"W": (64, 512), "x": ()}, expected, "cfg").startswith("W is 64 × 512")
    assert first_disagreement({"W": (128, 512), "x": ()}, expected, "cfg") == "it has no tensor b, which cfg needs"
    assert first_disagreement({**expected, "x": ()}, expected, "cfg") == "it holds a tensor x that cfg has no place for"


def test_shapes_come_from_the_header_and_a_meta_build(tmp_path):
    from safetensors.torch import save_file

    from nanolm.tensorfile import module_shapes, shapes_in_file

    # planted: a 3 × 5 weight and a 3 bias; the meta build of a 5 -> 3 Linear gives the same without memory
    save_file({"weight": torch.zeros(3, 5), "bias": torch.zeros(3)}, str(tmp_path / "w.safetensors"))
    assert shapes_in_file(tmp_path / "w.safetensors") == {"weight": (3, 5), "bias": (3,)}
    assert module_shapes(lambda: torch.nn.Linear(5, 3)) == {"weight": (3, 5), "bias": (3,)}
    big = module_shapes(lambda: torch.nn.Linear(10**6, 10**6))  # 4 TB if it were allocated
    assert big == {"weight": (10**6, 10**6), "bias": (10**6,)}


# ---- an SAE ------------------------------------------------------------------------------------------------------


@pytest.fixture
def sae_folder(tmp_path) -> Path:
    from nanolm.interp.sae.model import SAEConfig, SparseAutoencoder

    cfg = SAEConfig(d_in=64, d_sae=256, hook_name="blocks.0.hook_resid_post", hook_layer=0, model_name="m")
    return SparseAutoencoder(cfg).save(tmp_path / "sae")


def test_an_sae_whose_saelens_keys_and_nanolm_record_disagree_is_refused(sae_folder):
    from nanolm.interp.sae.model import load_sae

    edit_json(sae_folder / "cfg.json", lambda c: c.update(d_in=128))  # the folder: SAELens's d_in edited
    with pytest.raises(UserError) as e:
        load_sae(sae_folder)
    assert "d_in is 128 at the top" in str(e.value) and "64 under" in str(e.value)


@pytest.mark.parametrize(
    ("d_in", "shown"), [(128, "W_enc is 64 × 256 where cfg.json (d_in 128, d_sae 256) makes it 128 × 256"), (10**9, "10")]
)
def test_an_sae_whose_config_and_weights_disagree_is_refused_naming_both(sae_folder, d_in, shown):
    from nanolm.interp.sae.model import load_sae

    def both(c):
        c["d_in"] = d_in
        c["nanolm"]["d_in"] = d_in

    edit_json(sae_folder / "cfg.json", both)
    with pytest.raises(UserError) as e:
        load_sae(sae_folder)  # d_in 10⁹ × 256: 1 TB if the SAE were built before the check
    assert shown in str(e.value) and "sae_weights.safetensors disagrees with its config" in str(e.value)


def test_an_sae_with_another_saes_weights_is_refused_by_the_command(sae_folder, workdir, capfd, monkeypatch):
    from nanolm.interp.sae.model import SAEConfig, SparseAutoencoder

    other = SparseAutoencoder(SAEConfig(d_in=64, d_sae=128)).save(workdir / "other")
    shutil.copy(other / "sae_weights.safetensors", sae_folder / "sae_weights.safetensors")
    before = snapshot(sae_folder)
    monkeypatch.chdir(workdir)
    code, err = in_process(["sae", "eval", str(sae_folder), "--model", str(run_of(workdir, "words"))], capfd)
    assert_user_error(code, err, "W_enc is 64 × 128", "makes it 64 × 256")
    assert snapshot(sae_folder) == before


# ---- a reward model ------------------------------------------------------------------------------------------------


@pytest.fixture
def reward_folder(workdir) -> Path:
    from nanolm.alignment.reward_model import reward_model_from_run, save_reward_model

    return save_reward_model(reward_model_from_run(run_of(workdir, "words")), workdir / "rm")


def test_a_reward_model_whose_config_and_weights_disagree_is_refused(reward_folder, workdir, capfd, monkeypatch):
    edit_json(reward_folder / "reward_model.json", lambda c: c["model_config"].update(d_model=2 * D_MODEL))
    before = snapshot(reward_folder)
    monkeypatch.chdir(workdir)
    argv = ["feedback", "best-of-n", str(run_of(workdir, "words")), "--reward", str(reward_folder), "--n", "1,2"]
    code, err = in_process(argv, capfd)
    line = assert_user_error(code, err, "reward_model.safetensors disagrees with its config", f"d_model {2 * D_MODEL}")
    assert f"× {D_MODEL} where" in line and f"× {2 * D_MODEL}" in line  # both widths
    assert snapshot(reward_folder) == before


# ---- a tuned lens --------------------------------------------------------------------------------------------------


def test_a_tuned_lens_whose_meta_and_weights_disagree_is_refused(tmp_path):
    from nanolm.interp.tuned_lens import TunedLens

    folder = TunedLens(D_MODEL, 2).save(tmp_path / "lens", {"model": "m"})
    edit_json(folder / "tuned_lens.json", lambda m: m.update(n_layers=3))
    with pytest.raises(UserError) as e:
        TunedLens.load(folder)
    assert "has no tensor translators.2.weight" in str(e.value) and "n_layers 3" in str(e.value)
    edit_json(folder / "tuned_lens.json", lambda m: m.update(n_layers=2, d_model=10**7))  # 10¹⁴ floats if built
    with pytest.raises(UserError) as e:
        TunedLens.load(folder)
    assert f"translators.0.weight is {D_MODEL} × {D_MODEL} where tuned_lens.json (d_model 10000000" in str(e.value)


def test_a_tuned_lens_for_this_model_with_narrower_weights_is_refused_by_the_command(workdir, capfd, monkeypatch):
    from nanolm.interp.tuned_lens import TunedLens

    run = run_of(workdir, "words")
    folder = TunedLens(D_MODEL // 2, 1).save(workdir / "lens", {"model": "m"})
    edit_json(folder / "tuned_lens.json", lambda m: m.update(d_model=D_MODEL))  # says it fits the run's width
    monkeypatch.chdir(workdir)
    code, err = in_process(["lens", "eval", str(run), "--lens-dir", str(folder), "--batches", "1"], capfd)
    assert_user_error(code, err, f"is {D_MODEL // 2} × {D_MODEL // 2} where", f"makes it {D_MODEL} × {D_MODEL}")


# ---- a checkpoint --------------------------------------------------------------------------------------------------


def test_a_checkpoint_whose_state_and_weights_disagree_is_refused(workdir, capfd, monkeypatch):
    from nanolm.checkpoint import load_trained_model

    run = run_of(workdir, "words")
    states = sorted(run.glob("checkpoints/*/state.json"))
    assert states
    for state in states:
        edit_json(state, lambda s: s["model_config"].update(d_model=2 * D_MODEL))
    with pytest.raises(UserError) as e:
        load_trained_model(run)
    assert f"× {D_MODEL} where state.json's model_config" in str(e.value) and f"d_model {2 * D_MODEL}" in str(e.value)
    before = snapshot(run)
    monkeypatch.chdir(workdir)
    code, err = in_process(["sample", str(run), "--prompt", "the", "--tokens", "4"], capfd)
    assert_user_error(code, err, "model.safetensors disagrees with its config", f"d_model {2 * D_MODEL}")
    assert snapshot(run) == before
