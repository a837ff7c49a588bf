"""Config: defaults, TOML, typed --set overrides, unknown keys and bad values refused."""

from __future__ import annotations

import pytest

from nanolm.config import TrainConfig, make_config, parse_overrides
from nanolm.errors import UserError


def test_overrides_are_typed_by_the_field():
    assert parse_overrides(["lr=1e-3", "steps=1e3", "compile=true", "n_layer=2", "data=x.txt", "pos=none"]) == {
        "lr": 1e-3,
        "steps": 1000,
        "compile": True,
        "n_layer": 2,
        "data": "x.txt",
        "pos": None,
    }


def test_a_union_field_takes_the_first_type_that_fits():
    assert [make_config(overrides=[f"deterministic={v}"]).deterministic for v in ("true", "off", "warn")] == [True, False, "warn"]


def test_toml_then_overrides(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('name = "x"\nsteps = 50\n[model]\nn_layer = 2\n[optim]\nlr = 0.01\n')
    cfg = make_config(path, ["steps=60"])
    assert (cfg.name, cfg.steps, cfg.n_layer, cfg.lr) == ("x", 60, 2, 0.01)
    assert cfg.model_config(vocab_size=100).n_layer == 2


@pytest.mark.parametrize(
    "bad, match",
    [
        (["nosuch=1"], "unknown key 'nosuch'"),
        (["lr=0"], "lr must be > 0"),
        (["lr=inf"], "lr must be > 0 and finite"),
        (["weight_decay=nan"], "finite"),
        (["batch_size=-1"], "batch_size must be > 0"),
        (["steps=0"], "steps must be > 0"),
        (["steps=ten"], "not a valid int"),
        (["d_model=30", "n_head=4"], "not divisible"),
        (["preset=huge"], "unknown preset"),
        (["lr"], "expected key=value"),
        (["deterministic=maybe"], "deterministic must be true, false or warn"),
    ],
)
def test_bad_values_are_user_errors(bad, match):
    with pytest.raises(UserError, match=match):
        make_config(overrides=bad)


def test_unknown_key_in_toml(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("learning_rate = 0.1\n")
    with pytest.raises(UserError, match="unknown key 'learning_rate'"):
        make_config(path)


def test_gpt2_preset_keeps_its_padded_vocabulary():
    cfg = TrainConfig(preset="gpt2-124m")
    assert cfg.model_config(vocab_size=306).vocab_size == 50304
    assert TrainConfig().model_config(vocab_size=306).vocab_size == 306
