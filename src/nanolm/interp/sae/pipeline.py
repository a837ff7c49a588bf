"""From a model to a trained SAE and back: which texts, which hook, the model's fingerprint, where it is saved.

Texts: a nanolm run's own embedded corpus (its config's corpus_lines and seed), split as training split
it (the SAE trains on the training lines and is evaluated on the validation lines); or a text file, one
text per line, split the same way by content (10% held out).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import torch

from ...errors import UserError
from .model import SparseAutoencoder, load_sae
from .store import collect_store, token_batches
from .train import TrainResult, TrainSettings, fit_sae

HOOKS = ("resid_post", "resid_mid", "mlp_out", "resid_pre", "attn_out")
HELD_OUT = 0.1


def hook_name(view, layer: int, hook: str) -> str:
    """ "blocks.{layer}.hook_{hook}", after checking both exist in this model."""
    if hook not in HOOKS:
        raise UserError(f"--hook {hook!r}: give one of {', '.join(HOOKS)}")
    if not isinstance(layer, int) or not 0 <= layer < view.n_layers:
        raise UserError(f"--layer {layer}: this model has layers 0..{view.n_layers - 1}")
    if view.arch != "nanolm" and hook not in ("resid_post", "resid_pre"):
        raise UserError(f"--hook {hook}: a Hugging Face model is read at resid_pre or resid_post only")
    return f"blocks.{layer}.hook_{hook}"


def layer_of(name: str) -> int:
    m = re.match(r"blocks\.(\d+)\.", name)
    return int(m.group(1)) if m else -1


def fingerprint(view) -> float:
    """The model's fingerprint (its unembedding's; runs.weights_fingerprint)."""
    from ...runs import weights_fingerprint

    return weights_fingerprint(view.unembed.weight)


def check_same_model(sae: SparseAutoencoder, view, where: str = "the SAE") -> None:
    """A UserError when the SAE was trained on another model (by fingerprint) or its width differs."""
    from ...runs import same_fingerprint

    if sae.cfg.d_in != view.d_model and sae.cfg.hook_name.endswith(
        ("resid_post", "resid_pre", "resid_mid", "mlp_out", "attn_out")
    ):
        raise UserError(
            f"{where} reads {sae.cfg.d_in}-wide activations but this model's are {view.d_model}: it was trained on another model"
        )
    fp = sae.cfg.model_fingerprint
    if fp is not None and not same_fingerprint(fp, fingerprint(view)):
        raise UserError(
            f"{where} was trained on another model ({sae.cfg.model_name or 'unnamed'}): its fingerprint "
            "does not match this model's weights; train an SAE on this model"
        )


def split_texts(lines: list[str], held_out: float = HELD_OUT) -> tuple[list[str], list[str]]:
    """(training texts, held-out texts) split by content (corpus.is_val_line), empty lines dropped."""
    from ...corpus import is_val_line

    lines = [line for line in lines if line.strip()]
    return [t for t in lines if not is_val_line(t, held_out)], [t for t in lines if is_val_line(t, held_out)]


def texts_for(view, data: str | Path | None = None) -> tuple[list[str], list[str]]:
    """(training texts, held-out texts): the file's lines, else the run's own corpus split as it trained."""
    if data is not None:
        path = Path(data)
        if not path.is_file():
            raise UserError(f"--data {path}: no such file; give a text file with one text per line")
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            raise UserError(f"--data {path}: not UTF-8 text") from None
        train, held = split_texts(lines)
        if not train or not held:
            raise UserError(f"--data {path}: {len(train)} training and {len(held)} held-out lines; give more lines")
        return train, held
    if view.run_dir is None:
        raise UserError("this model has no embedded corpus: give --data FILE (one text per line)")
    from ...corpus import generate_corpus
    from ...runs import read_manifest

    cfg = read_manifest(view.run_dir).config
    if cfg.get("data"):
        raise UserError(f"run {view.name} trained on {cfg['data']}: give --data FILE to read activations from")
    corpus = generate_corpus(int(cfg.get("corpus_lines", 40_000)), int(cfg.get("corpus_seed", 0)))
    return split_texts(corpus.lines, float(cfg.get("val_fraction", HELD_OUT)))


def train_sae(
    view,
    layer: int,
    hook: str = "resid_post",
    settings: TrainSettings | None = None,
    tokens: int = 200_000,
    data: str | Path | None = None,
    device: str | torch.device | None = None,
    store_folder: Path | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> TrainResult:
    """Collect up to `tokens` activations at blocks.{layer}.hook_{hook} from the training texts, then fit
    an SAE on them. progress(stage, done, total) with stage "collect" (tokens) or "train" (steps)."""
    name = hook_name(view, layer, hook)
    settings = settings or TrainSettings()
    if not isinstance(tokens, int) or tokens < 1:
        raise UserError(f"--tokens must be a positive integer, got {tokens!r}")
    if tokens < settings.batch_size:
        raise UserError(
            f"--tokens {tokens:,} is fewer than one batch of {settings.batch_size:,}; "
            "give more --tokens or a smaller --batch-size"
        )
    train_texts, _ = texts_for(view, data)
    report = (lambda n: progress("collect", n, tokens)) if progress else None
    store = collect_store(token_batches(view, train_texts, name), tokens, view.d_model, store_folder, progress=report)
    collected = store.n  # before close(), which empties a store on disk
    try:
        if store.n < settings.batch_size:
            raise UserError(
                f"the texts give only {store.n:,} tokens, fewer than one batch of {settings.batch_size:,}; "
                "give more text (--data) or a smaller --batch-size"
            )
        train_progress = (lambda step, steps, _row: progress("train", step, steps)) if progress else None
        result = fit_sae(
            store,
            settings,
            device or view.device,
            train_progress,
            hook_name=name,
            hook_layer=layer,
            model_name=view.name,
            model_fingerprint=fingerprint(view),
        )
    finally:
        store.close()
    # the texts may hold fewer tokens than asked: what was asked and what they gave, in the result and the SAE's cfg
    result.tokens_asked, result.tokens_collected = tokens, collected
    result.sae.cfg.extra.update({"tokens_asked": tokens, "tokens_collected": collected})
    return result


def load_sae_for(view, folder: str | Path) -> SparseAutoencoder:
    """load_sae, refused (one line) when it was trained on another model."""
    sae = load_sae(folder, view.device)
    check_same_model(sae, view, str(folder))
    return sae
