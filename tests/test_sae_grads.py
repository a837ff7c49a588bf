"""The relu SAE's hand-written gradient (train._Trainer.relu_grads) against autograd on the same loss."""

from __future__ import annotations

import pytest
import torch

from nanolm.interp.sae.store import store_from_tensor
from nanolm.interp.sae.train import TrainSettings, _Trainer


@pytest.mark.parametrize("step", [0, 40])  # λ still warming up, and at its full value
def test_relu_grads_equal_autograd(step):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(256, 16, generator=gen) + 0.5
    settings = TrainSettings(d_sae=64, batch_size=32, steps=50, l1=0.3)
    cfg = settings.sae_config(16)
    t = _Trainer(store_from_tensor(x), settings, cfg, torch.device("cpu"))
    t.sae.double()
    with torch.no_grad():  # away from the initial point: biases set, decoder rows of unequal norms, some latents off
        t.sae.b_enc.copy_(torch.randn(64, generator=gen, dtype=torch.float64) * 0.3 - 0.1)
        t.sae.b_dec.copy_(torch.randn(16, generator=gen, dtype=torch.float64) * 0.2)
        t.sae.W_dec.mul_(torch.rand(64, 1, generator=gen, dtype=torch.float64) + 0.5)
    batch = x[:32].double()

    loss, parts, f = t.loss(batch, step)
    loss.backward()
    expected = {name: p.grad.clone() for name, p in t.sae.named_parameters()}
    t.sae.zero_grad(set_to_none=True)

    loss_hand, parts_hand, counts = t.relu_grads(batch, step)
    assert 0 < float(counts.sum()) < f.numel()  # some latents fire, not all
    torch.testing.assert_close(loss_hand, loss.detach(), rtol=1e-12, atol=1e-12)
    assert parts_hand == pytest.approx(parts, rel=1e-12)
    assert counts.tolist() == (f.detach() > 0).sum(0).tolist()
    for name, p in t.sae.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], rtol=1e-10, atol=1e-14, msg=name)
