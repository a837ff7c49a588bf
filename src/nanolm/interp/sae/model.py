"""The sparse autoencoder itself: encode, decode, splice into a model, save and load.

Activations x of dimension D are written over a dictionary of M >> D directions (the rows of W_dec),
few of them active at a time:

    relu:  f = ReLU(W_enc·(x - b_dec) + b_enc)                       (the reference document's formula)
    topk:  f = ReLU(TopK_K(W_enc·(x - b_dec) + b_enc))               (Gao et al. 2024: only the K largest)
    x̂ = W_dec·f + b_dec

Shapes follow SAELens: W_enc [D, M], W_dec [M, D], b_enc [M], b_dec [D]; an activation batch is [..., D].
The saved form is SAELens's layout (``cfg.json`` + ``sae_weights.safetensors``, and the latents' firing
densities in ``sparsity.safetensors``), with nanolm's own record under the ``"nanolm"`` key of cfg.json,
so an SAE moves between the two. The weights work on the raw activations: a scale used in training
is folded into them before saving. No pickle anywhere.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...errors import UserError
from ...tensorfile import check_tensors_match_config, module_shapes, shapes_in_file

ARCHS = ("relu", "topk")
# SAELens's names for the two architectures ("standard" is its ReLU SAE).
SAELENS_ARCH = {"relu": "standard", "topk": "topk"}
WEIGHTS = "sae_weights.safetensors"
SPARSITY = "sparsity.safetensors"
CFG = "cfg.json"
SCHEMA = 1


@dataclass
class SAEConfig:
    """What an SAE is and where it reads: its shape, architecture, and the model and hook point it was
    trained on (a different model or hook is refused on load)."""

    d_in: int  # D: the activation's width
    d_sae: int  # M: the dictionary's size
    arch: str = "relu"  # "relu" or "topk"
    k: int | None = None  # topk: active latents per token
    hook_name: str = ""  # "blocks.1.hook_resid_post"
    hook_layer: int = -1
    model_name: str = ""
    model_fingerprint: float | None = None  # runs.weights_fingerprint of the model's unembedding
    extra: dict[str, Any] = field(default_factory=dict)  # training record: l1, steps, tokens, scale, ...

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise UserError(f"SAE architecture {self.arch!r}: give one of {', '.join(ARCHS)}")
        for name in ("d_in", "d_sae"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(f"SAE {name} must be a positive integer, got {value!r}")
        if self.arch == "topk":
            if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 1:
                raise UserError(f"--k must be a positive integer, got {self.k!r}")
            if self.k >= self.d_sae:
                raise UserError(f"--k {self.k} must be below the dictionary size M = {self.d_sae}; lower K or raise --expansion")

    def to_saelens(self) -> dict:
        """cfg.json: SAELens's keys (architecture, d_in, d_sae, hook_name, ...) and nanolm's under "nanolm"."""
        cfg = {
            "architecture": SAELENS_ARCH[self.arch],
            "d_in": self.d_in,
            "d_sae": self.d_sae,
            "dtype": "float32",
            "device": "cpu",
            "model_name": self.model_name,
            "hook_name": self.hook_name,
            "hook_layer": self.hook_layer,
            "hook_head_index": None,
            "apply_b_dec_to_input": True,
            "normalize_activations": "none",
            "finetuning_scaling_factor": False,
            "context_size": None,
            "dataset_path": "",
            "prepend_bos": True,
            "sae_lens_training_version": None,
        }
        if self.arch == "topk":
            cfg["activation_fn"] = "topk"
            cfg["activation_fn_kwargs"] = {"k": self.k}
            cfg["k"] = self.k
        else:
            cfg["activation_fn"] = "relu"
            cfg["activation_fn_kwargs"] = {}
        cfg["nanolm"] = {"schema": SCHEMA, **asdict(self)}
        return cfg

    @classmethod
    def from_saelens(cls, cfg: dict, where: str) -> SAEConfig:
        """From cfg.json: nanolm's own record when present, else SAELens's keys."""
        own = cfg.get("nanolm")
        try:
            if isinstance(own, dict):
                own = cls(**{k: v for k, v in own.items() if k != "schema"})
                _check_saelens_keys_agree(own, cfg, where)
                return own
            arch = {"standard": "relu", "topk": "topk", "relu": "relu"}.get(cfg.get("architecture", "standard"))
            if arch is None:
                raise UserError(
                    f"{where}: SAE architecture {cfg.get('architecture')!r} is not one nanolm runs "
                    f"(it runs {', '.join(SAELENS_ARCH.values())})"
                )
            k = (cfg.get("activation_fn_kwargs") or {}).get("k", cfg.get("k")) if arch == "topk" else None
            return cls(
                int(cfg["d_in"]),
                int(cfg["d_sae"]),
                arch,
                k,
                cfg.get("hook_name", ""),
                int(cfg.get("hook_layer", -1)),
                cfg.get("model_name", ""),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(f"{where}: not an SAE config ({type(e).__name__}: {e})") from None


def _check_saelens_keys_agree(own: SAEConfig, cfg: dict, where: str) -> None:
    """cfg.json says what the SAE is twice: SAELens's keys at the top (what SAELens reads) and nanolm's record under
    "nanolm" (what nanolm reads). A UserError naming both values when a key says one thing and the record another."""
    record = asdict(own)
    record["architecture"] = SAELENS_ARCH[own.arch]
    keys = ["architecture", "d_in", "d_sae", "hook_name", "hook_layer", "model_name"] + (["k"] * (own.arch == "topk"))
    for key in keys:
        if key in cfg and cfg[key] != record[key]:
            raise UserError(
                f'{where}: {key} is {cfg[key]!r} at the top (SAELens\'s keys) but {record[key]!r} under "nanolm"; '
                "the two must agree: restore the file or train the SAE again"
            )


class SparseAutoencoder(nn.Module):
    """f = act(W_enc·(x - b_dec) + b_enc); x̂ = W_dec·f + b_dec (see the module docstring)."""

    def __init__(self, cfg: SAEConfig) -> None:
        super().__init__()
        self.cfg = cfg
        D, M = cfg.d_in, cfg.d_sae
        self.W_enc = nn.Parameter(torch.empty(D, M))
        self.W_dec = nn.Parameter(torch.empty(M, D))
        self.b_enc = nn.Parameter(torch.zeros(M))
        self.b_dec = nn.Parameter(torch.zeros(D))
        self.reset_parameters()

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Decoder rows in random directions at norm 0.1, the encoder their transpose (SAELens 6, and
        Anthropic's April 2024 update: the encoder starts as the decoder's inverse up to scale)."""
        with torch.no_grad():
            w = torch.randn(self.cfg.d_sae, self.cfg.d_in, generator=generator)
            w = 0.1 * w / w.norm(dim=1, keepdim=True)
            self.W_dec.copy_(w)
            self.W_enc.copy_(w.T)
            self.b_enc.zero_()
            self.b_dec.zero_()

    @property
    def arch(self) -> str:
        return self.cfg.arch

    def pre_acts(self, x: torch.Tensor) -> torch.Tensor:
        """[..., D] -> [..., M]: W_enc·(x - b_dec) + b_enc, before the activation."""
        return (x - self.b_dec) @ self.W_enc + self.b_enc

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        """The latents from pre-activations: ReLU, or ReLU of the K largest (the rest exactly 0)."""
        if self.arch == "relu":
            return torch.relu(pre)
        top = pre.topk(self.cfg.k, dim=-1)
        return torch.zeros_like(pre).scatter_(-1, top.indices, torch.relu(top.values))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """[..., D] -> f [..., M]."""
        return self.activate(self.pre_acts(x))

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        """[..., M] -> x̂ [..., D]."""
        return f @ self.W_dec + self.b_dec

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x̂ = decode(encode(x)), the same shape as x."""
        return self.decode(self.encode(x.to(self.W_enc.dtype))).to(x.dtype)

    def decoder_norms(self) -> torch.Tensor:
        """[M]: ‖W_dec,i‖, the weights of the L1 term (a latent cannot dodge its penalty by shrinking f
        and growing its decoder row)."""
        return self.W_dec.norm(dim=1)

    # ---- scale: training sees x·s; the saved weights read raw x ---------------------------------------
    @torch.no_grad()
    def fold_scale(self, scale: float) -> None:
        """Trained on x·scale, make it an SAE of raw x with the same latents on the same inputs:
        f(x·s) = act(W_enc·(x·s - b_dec) + b_enc) = act((s·W_enc)·(x - b_dec/s) + b_enc), and
        x̂ = (W_dec·f + b_dec)/s = (W_dec/s)·f + b_dec/s."""
        self.W_enc.mul_(scale)
        self.W_dec.div_(scale)
        self.b_dec.div_(scale)

    # ---- files ------------------------------------------------------------------------------------
    def save(self, folder: str | Path, densities: torch.Tensor | None = None) -> Path:
        """cfg.json + sae_weights.safetensors (+ sparsity.safetensors: log10 firing density per latent),
        in SAELens's layout, each written atomically; the folder."""
        from safetensors.torch import save as to_bytes

        from ...io import atomic_write_bytes, atomic_write_json

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {name: p.detach().float().cpu().contiguous() for name, p in self.named_parameters()}
        atomic_write_bytes(folder / WEIGHTS, to_bytes(tensors))
        if densities is not None:
            log = torch.log10(densities.detach().float().cpu().clamp_min(1e-10)).contiguous()
            atomic_write_bytes(folder / SPARSITY, to_bytes({"sparsity": log}))
        atomic_write_json(folder / CFG, _finite(self.cfg.to_saelens()))
        return folder


def _finite(obj: Any) -> Any:
    """JSON has no NaN: a non-finite float is written as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def load_sae(folder: str | Path, device: str | torch.device = "cpu") -> SparseAutoencoder:
    """An SAE saved by nanolm (or by SAELens, for the architectures nanolm runs); a UserError naming the
    file when it is missing, corrupt, or its tensors do not match its config."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(folder)
    if not (folder / CFG).is_file() or not (folder / WEIGHTS).is_file():
        raise UserError(f"{folder}: not an SAE folder (needs {CFG} and {WEIGHTS}); train one with nanolm sae train")
    try:
        raw = json.loads((folder / CFG).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{folder / CFG}: not valid JSON ({e.__class__.__name__}); the SAE file is damaged") from None
    if not isinstance(raw, dict):
        raise UserError(f"{folder / CFG}: not an SAE config (a JSON object is expected)")
    cfg = SAEConfig.from_saelens(raw, str(folder / CFG))
    try:
        found = shapes_in_file(folder / WEIGHTS)
    except (SafetensorError, OSError, ValueError) as e:
        raise UserError(f"{folder / WEIGHTS}: damaged weights ({e}); train the SAE again") from None
    # Held to the config before anything is built or read at the config's size (a d_in edited to 10⁹ allocates nothing).
    expected = module_shapes(lambda: SparseAutoencoder(cfg))
    found = {name: shape for name, shape in found.items() if name in expected}  # SAELens may save more
    described = f"{CFG} (d_in {cfg.d_in}, d_sae {cfg.d_sae})"
    check_tensors_match_config(
        folder / WEIGHTS, found, expected, described, "the folder mixes two SAEs' files: train the SAE again"
    )
    try:
        tensors = load_file(str(folder / WEIGHTS))
    except (SafetensorError, OSError, ValueError) as e:
        raise UserError(f"{folder / WEIGHTS}: damaged weights ({e}); train the SAE again") from None
    sae = SparseAutoencoder(cfg)
    with torch.no_grad():
        for name, p in sae.named_parameters():
            t = tensors[name].float()
            if not torch.isfinite(t).all():
                raise UserError(f"{folder / WEIGHTS}: {name} holds NaN or infinite values; train the SAE again")
            p.copy_(t)
    return sae.to(device).eval()


def read_densities(folder: str | Path) -> torch.Tensor | None:
    """[M] firing density of each latent from sparsity.safetensors (stored as log10), or None."""
    from safetensors.torch import load_file

    path = Path(folder) / SPARSITY
    if not path.is_file():
        return None
    return 10 ** load_file(str(path))["sparsity"]


@contextmanager
def spliced(view, sae: SparseAutoencoder, hook: str | None = None) -> Iterator[Any]:
    """Within the with-block, the model reads the SAE's reconstruction x̂ in place of the activation at
    `hook` (default: the hook the SAE was trained on):

    >>> with spliced(view, sae):
    ...     logits = view.logits(tokens)
    """
    name = hook or sae.cfg.hook_name
    if not name:
        raise UserError("this SAE records no hook point; give the hook to splice it at")
    with view.edit(name, lambda x: sae(x)):
        yield view
