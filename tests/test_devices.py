"""Device paths: bf16 autocast (on CPU it is opt-in, on CUDA the default), torch.compile, CUDA."""

from __future__ import annotations

import math

import pytest
import torch

from nanolm.train import autocast_dtype, resolve_device, train

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; none on this machine")


def test_autocast_choice():
    cpu = torch.device("cpu")
    assert autocast_dtype("auto", cpu) is None and autocast_dtype("none", cpu) is None
    assert autocast_dtype("bf16", cpu) is torch.bfloat16
    assert resolve_device("cpu") == cpu


def test_bf16_autocast_trains_on_cpu(tiny):
    result = train(tiny("steps=20", "eval_every=20", "ckpt_every=20", "autocast=bf16", "lr=1e-2"), progress=False)
    assert math.isfinite(result.val_loss) and result.val_loss < result.unigram_entropy + 1.0


@pytest.mark.slow
def test_compiled_model_trains_on_cpu(tiny):
    result = train(tiny("steps=4", "eval_every=4", "ckpt_every=4", "compile=true"), progress=False)
    assert math.isfinite(result.val_loss)


@needs_cuda
def test_cuda_bf16_training_and_resume(tiny):
    assert autocast_dtype("auto", torch.device("cuda")) is torch.bfloat16 or not torch.cuda.is_bf16_supported()
    part = train(tiny("steps=8", "eval_every=4", "ckpt_every=4", "device=cuda"), stop_at=4, progress=False)
    resumed = train(resume=part.run_dir, progress=False)
    assert resumed.status == "finished" and math.isfinite(resumed.val_loss)


@needs_cuda
def test_cuda_compile(tiny):
    result = train(tiny("steps=4", "eval_every=4", "ckpt_every=4", "device=cuda", "compile=true"), progress=False)
    assert math.isfinite(result.val_loss)
