"""Compiled kernels (compile_kernels): each block's norms and attention compiled on their own give the eager
model's logits, loss and gradients up to float rounding, against an independent float64 reference too; hooks
fire on the same tensors; `auto` stays off where it would not pay or was not measured (tiny models, CUDA,
whole-model compile) without ever starting the compiler there; a missing compiler is silent under auto and a
one-line error under true; a run records which code computed it and resumes bit for bit with compiled kernels."""

from __future__ import annotations

import shutil

import pytest
import torch

from nanolm.config import TrainConfig, make_config
from nanolm.errors import UserError
from nanolm.model import GPT, MLP, CausalSelfAttention, GPTConfig, RMSNorm, compile_kernels, preset_config
from nanolm.runs import read_manifest, read_metrics
from nanolm.train import compiler_works, kernels_compiled, train
from nanolm.training import optim as train_module  # where kernels_compiled looks compiler_works up
from test_model import reference_logits

CPU = torch.device("cpu")
SHAPE = dict(vocab_size=50, block_size=16, n_layer=2, n_head=2, d_model=32)


# torch.compile's CPU kernels are C++: where a compiler is installed it must work (the tests then fail if not).
needs_compiler = pytest.mark.skipif(
    not any(shutil.which(c) for c in ("g++", "c++", "clang++")),
    reason="no C++ compiler: torch.compile cannot build CPU kernels here",
)


def twin_models(**kw) -> tuple[GPT, GPT]:
    """Two copies of one tiny model (non-trivial norm gains); the second with compiled kernels."""
    torch.manual_seed(0)
    eager = GPT(GPTConfig(**{**SHAPE, **kw}))
    with torch.no_grad():
        for name, p in eager.named_parameters():
            if "ln" in name:
                p.uniform_(0.5, 1.5)  # a gain the norm dropped would show
    twin = GPT(eager.cfg)
    twin.load_state_dict(eager.state_dict())
    return eager, compile_kernels(twin)


@needs_compiler
def test_compiled_kernels_give_eager_logits_loss_and_gradients_and_the_same_hooks():
    assert compiler_works("cpu")
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list as compiled_entries

    eager, compiled = twin_models()
    idx = torch.randint(0, 50, (3, 16), generator=torch.Generator().manual_seed(1))
    logits_c, loss_c = compiled(idx, idx)
    # Compiled code now exists for the norms' and the attention's forward (torch.compile skips a module of
    # torch.nn's own when it is compiled alone; this is why the norms are nanolm's RMSNorm) and none for the MLP.
    assert compiled_entries(RMSNorm.forward.__code__) and compiled_entries(CausalSelfAttention.forward.__code__)
    assert not compiled_entries(MLP.forward.__code__)
    logits_e, loss_e = eager(idx, idx)
    torch.testing.assert_close(logits_c, logits_e, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits_c.double(), reference_logits(compiled, idx), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loss_c, loss_e, atol=1e-6, rtol=1e-6)
    loss_c.backward()
    loss_e.backward()
    for (name, p), q in zip(compiled.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-4, msg=name)

    # Hooks stay eager code: every hook point fires, on the same tensors, and an edit changes the output alike.
    _, cache_c = compiled.run_with_cache(idx)
    _, cache_e = eager.run_with_cache(idx)
    assert list(cache_c) == list(cache_e) == list(eager.hook_points())
    for name in cache_e:
        torch.testing.assert_close(cache_c[name], cache_e[name], atol=1e-5, rtol=1e-5, msg=name)
    ablate = {"blocks.0.hook_attn_out": lambda x, name: torch.zeros_like(x)}
    with compiled.hooks(ablate):
        ablated_c, _ = compiled(idx)
    with eager.hooks(ablate):
        ablated_e, _ = eager(idx)
    torch.testing.assert_close(ablated_c, ablated_e, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(ablated_e, logits_e, atol=1e-3)  # the ablation did change something


def test_auto_is_off_where_it_does_not_pay_and_never_starts_the_compiler_there(monkeypatch):
    def no_probe(device_type: str) -> bool:
        raise AssertionError("the compiler probe ran for a run that auto keeps eager")

    monkeypatch.setattr(train_module, "compiler_works", no_probe)
    small, tiny = preset_config("small", vocab_size=300), preset_config("tiny", vocab_size=300)
    test_sized = GPTConfig(**SHAPE)
    cfg = TrainConfig(preset="small").validate()
    assert cfg.compile_kernels == "auto"
    assert not kernels_compiled(cfg, tiny, CPU)  # the demo's model
    assert not kernels_compiled(cfg, test_sized, CPU)  # the test suite's
    assert not kernels_compiled(cfg, small, torch.device("cuda"))  # not measured there
    assert not kernels_compiled(TrainConfig(preset="small", compile=True).validate(), small, CPU)  # compiled whole
    assert not kernels_compiled(TrainConfig(preset="small", compile_kernels=False).validate(), small, CPU)
    assert not kernels_compiled(TrainConfig(preset="small", compile=True, compile_kernels=True).validate(), small, CPU)

    monkeypatch.setattr(train_module, "compiler_works", lambda device_type: device_type == "cpu")
    assert kernels_compiled(cfg, small, CPU)  # where it was measured faster
    assert kernels_compiled(TrainConfig(compile_kernels=True).validate(), tiny, CPU)  # asked for


def test_without_a_compiler_auto_stays_eager_and_true_is_a_user_error(monkeypatch):
    monkeypatch.setattr(train_module, "compiler_works", lambda device_type: False)
    small = preset_config("small", vocab_size=300)
    assert not kernels_compiled(TrainConfig(preset="small").validate(), small, CPU)
    with pytest.raises(UserError, match="compile_kernels=true.*C\\+\\+ compiler.*compile_kernels=auto or false"):
        kernels_compiled(TrainConfig(preset="small", compile_kernels=True).validate(), small, CPU)


def test_a_failing_compiler_is_a_quiet_no(monkeypatch, capfd):
    def broken(*args, **kwargs):
        raise RuntimeError("InductorError: CppCompileError: C++ compile error: g++ not found")

    monkeypatch.setattr(torch, "compile", broken)
    assert compiler_works.__wrapped__("cpu") is False
    assert capfd.readouterr() == ("", "")


def test_compile_kernels_is_a_config_key_with_three_values():
    assert make_config(overrides=["compile_kernels=true"]).compile_kernels is True
    assert make_config(overrides=["compile_kernels=off"]).compile_kernels is False
    assert make_config(overrides=["compile_kernels=auto"]).compile_kernels == "auto"
    with pytest.raises(UserError, match="compile_kernels must be auto, true or false"):
        make_config(overrides=["compile_kernels=sometimes"])


def test_a_default_tiny_run_is_eager_and_says_so(tiny):
    result = train(tiny("steps=2", "eval_every=2", "ckpt_every=2"), progress=False)
    assert read_manifest(result.run_dir).determinism["compiled_kernels"] is False


@pytest.mark.slow
@needs_compiler
def test_a_run_with_compiled_kernels_resumes_bit_for_bit(tiny):
    """As test_train's resume test (dropout on, so the compiled attention draws random numbers), with
    compile_kernels=true."""
    overrides = ("steps=8", "log_every=1", "eval_every=4", "ckpt_every=100", "dropout=0.1", "compile_kernels=true")
    full = train(tiny(*overrides, name="full", deterministic=True), progress=False)
    part = train(tiny(*overrides, name="part", deterministic=True), stop_at=3, progress=False)
    resumed = train(resume=part.run_dir, progress=False)
    assert resumed.status == "finished"
    losses_full = [(r["step"], r["train_loss"], r.get("val_loss")) for r in read_metrics(full.run_dir)]
    losses_resumed = [(r["step"], r["train_loss"], r.get("val_loss")) for r in read_metrics(part.run_dir)]
    assert [s for s, *_ in losses_resumed] == list(range(1, 9))
    assert losses_full == losses_resumed  # floats compared exactly
    manifest = read_manifest(part.run_dir)
    assert manifest.determinism["compiled_kernels"] is True and manifest.resumes[0]["compiled_kernels"] is True
