"""One view of a causal LM for the interpretability tools: its residual stream at each layer, its
final norm and its unembedding, the same for nanolm and for Hugging Face models.

Hook names follow TransformerLens: ``blocks.{l}.hook_resid_pre`` is what enters block l (for l = 0,
the embedding output, positions included) and ``blocks.{l}.hook_resid_post`` what leaves it.
nanolm models expose all of their own hook points as well. Hugging Face models are read through
forward hooks on their decoder layers, so their code is not changed; ``transformers`` is an
optional extra, imported only when a Hugging Face model is loaded, and only from a local path.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import UserError
from ..model import GPT
from ..tokenizers import TokenizerLike

# fn(activation [B, T, D]) -> the activation to use instead, or None to keep it.
EditFn = Callable[[torch.Tensor], torch.Tensor | None]

# Where each supported Hugging Face architecture keeps its parts: (decoder layers, final norm).
HF_LAYOUTS = {
    "gpt2": ("transformer.h", "transformer.ln_f"),
    "llama": ("model.layers", "model.norm"),
    "gpt_neox": ("gpt_neox.layers", "gpt_neox.final_layer_norm"),
}
_HOOK_RE = re.compile(r"^blocks\.(\d+)\.hook_(resid_pre|resid_post)$")


@dataclass
class HFTokenizer:
    """A Hugging Face tokenizer behind the small interface nanolm's tokenizers have."""

    tok: Any

    @property
    def vocab_size(self) -> int:
        return len(self.tok)

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def token_str(self, i: int) -> str:
        return self.tok.decode([i])

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(list(ids))

    @property
    def eos_id(self) -> int | None:
        """The tokenizer's end-of-text token (eos_token_id), or None."""
        return self.tok.eos_token_id

    def unknown_words(self, text: str) -> list[str]:
        """Pieces of text the tokenizer reads as its unknown token, in order of appearance (none for a
        byte-level tokenizer such as GPT-2's, or one without character offsets)."""
        unk = self.tok.unk_token_id
        if unk is None or not getattr(self.tok, "is_fast", False):
            return []
        enc = self.tok(text, add_special_tokens=False, return_offsets_mapping=True)
        pieces = (
            text[a:b]
            for i, (a, b) in zip(enc["input_ids"], enc["offset_mapping"])
            if i == unk and text[a:b] != self.tok.unk_token
        )  # the token written out is known
        return list(dict.fromkeys(pieces))

    @property
    def bos_id(self) -> int | None:
        return self.tok.bos_token_id


class ModelView:
    """A causal LM seen as: embed -> blocks -> final norm -> W_U.

    model: an nn.Module in eval mode whose forward(tokens [B, T]) gives logits [B, T, V]
    (directly, as a tuple's first element, or as ``.logits``)."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: TokenizerLike | None,
        *,
        arch: str,
        blocks: nn.ModuleList,
        final_norm: nn.Module,
        unembed: nn.Linear,
        max_len: int,
        bos_id: int | None,
        name: str = "",
        run_dir: Path | None = None,
    ) -> None:
        self.model, self.tokenizer, self.arch, self.name = model, tokenizer, arch, name
        self.run_dir = run_dir  # the nanolm run it came from, if any
        self.blocks, self.final_norm, self.unembed = blocks, final_norm, unembed
        self.max_len, self.bos_id = max_len, bos_id

    # ---- shapes ------------------------------------------------------------------------------
    @property
    def n_layers(self) -> int:
        return len(self.blocks)

    @property
    def d_model(self) -> int:
        return self.unembed.weight.shape[1]

    @property
    def vocab_size(self) -> int:
        return self.unembed.weight.shape[0]

    @property
    def W_U(self) -> torch.Tensor:
        """[D, V]"""
        return self.unembed.weight.T

    @property
    def device(self) -> torch.device:
        return self.unembed.weight.device

    def resid_names(self) -> list[str]:
        """The residual stream the lens reads, in order: the embedding output, then every block's output."""
        return ["blocks.0.hook_resid_pre"] + [f"blocks.{l}.hook_resid_post" for l in range(self.n_layers)]

    def layer_labels(self) -> list[str]:
        return ["embed"] + [str(l) for l in range(self.n_layers)]

    def resid_name(self, layer: int | str) -> str:
        """The hook name of a lens layer: "embed" or -1 is the embedding output, l is block l's output."""
        if layer in ("embed", -1):
            return "blocks.0.hook_resid_pre"
        try:
            l = int(layer)
        except ValueError:
            raise UserError(f"layer {layer!r} is not a number or 'embed'") from None
        if not 0 <= l < self.n_layers:
            raise UserError(f"layer {l} is out of range: this model has layers 0..{self.n_layers - 1} (and 'embed')")
        return f"blocks.{l}.hook_resid_post"

    # ---- tokens ------------------------------------------------------------------------------
    def to_tokens(self, text: str, prepend_bos: bool = True) -> torch.Tensor:
        """[1, T] token ids of text, after a start-of-document token where the model has one."""
        if self.tokenizer is None:
            raise UserError(
                f"{self.name or 'this model'} has no tokenizer (no {', '.join(TOKENIZER_FILES[:3])} "
                "beside its weights); save its tokenizer there, or pass token ids instead of text"
            )
        ids = self.tokenizer.encode(text)
        if not ids:  # before the start token, which alone would show nothing of the prompt
            raise UserError("the prompt is empty; give some text")
        if prepend_bos and self.bos_id is not None:
            ids = [self.bos_id] + ids
        if len(ids) > self.max_len:
            raise UserError(f"the prompt is {len(ids)} tokens, longer than the model's context of {self.max_len}; shorten it")
        return torch.tensor([ids], device=self.device)

    def token_str(self, i: int) -> str:
        return self.tokenizer.token_str(i) if self.tokenizer is not None else str(i)

    # ---- forward -----------------------------------------------------------------------------
    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """[B, T] -> [B, T, V]"""
        out = self.model(tokens)
        if isinstance(out, tuple):
            return out[0]
        return out.logits if hasattr(out, "logits") else out

    def unembed_resid(self, resid: torch.Tensor, final_norm: bool = True) -> torch.Tensor:
        """[..., D] -> [..., V]: the model's own final norm (unless final_norm=False), then W_U (+ bias)."""
        return self.unembed(self.final_norm(resid) if final_norm else resid)

    @contextmanager
    def hooks(self, fns: dict[str, EditFn]) -> Iterator[ModelView]:
        """Run fns on the named activations during the forward passes of the with-block; a function
        that returns a tensor replaces the activation. Hooks are removed on exit, also on error."""
        if isinstance(self.model, GPT):
            try:
                self.model.check_hook_names(fns)  # the same error type as a Hugging Face view's, before any hook is on
            except KeyError as e:
                raise UserError(str(e.args[0])) from None
            with self.model.hooks({name: (lambda x, _name, fn=fn: fn(x)) for name, fn in fns.items()}):
                yield self
            return
        handles = []
        try:
            for name, fn in fns.items():
                handles.append(self._register_hf_hook(name, fn))
            yield self
        finally:
            for h in handles:
                h.remove()

    def _register_hf_hook(self, name: str, fn: EditFn) -> Any:
        m = _HOOK_RE.match(name)
        if m is None or int(m.group(1)) >= self.n_layers:
            raise UserError(
                f"unknown hook point {name!r}; this model has blocks.{{0..{self.n_layers - 1}}}.hook_{{resid_pre,resid_post}}"
            )
        block = self.blocks[int(m.group(1))]
        if m.group(2) == "resid_pre":

            def pre(_module, args, kwargs):
                if args:
                    new = fn(args[0])
                    return None if new is None else ((new, *args[1:]), kwargs)
                new = fn(kwargs["hidden_states"])
                return None if new is None else (args, {**kwargs, "hidden_states": new})

            return block.register_forward_pre_hook(pre, with_kwargs=True)

        def post(_module, _args, output):
            # transformers >= 5 returns the hidden states; older versions a tuple starting with them
            if isinstance(output, tuple):
                new = fn(output[0])
                return None if new is None else (new, *output[1:])
            return fn(output)

        return block.register_forward_hook(post)

    def run_with_cache(
        self, tokens: torch.Tensor, names: list[str] | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(logits [B, T, V], {name: activation [B, T, D]}); names default to resid_names()."""
        names = self.resid_names() if names is None else names
        cache: dict[str, torch.Tensor] = {}

        def saver(name: str) -> EditFn:
            def save(x: torch.Tensor) -> None:
                cache[name] = x.detach()

            return save

        with self.hooks({name: saver(name) for name in names}):
            logits = self.logits(tokens)
        return logits, cache

    @contextmanager
    def edit(self, name: str, fn: EditFn) -> Iterator[ModelView]:
        """Replace one activation during the forward passes of the with-block:

        >>> with view.edit("blocks.1.hook_resid_post", lambda x: x - (x @ v)[..., None] * v):
        ...     logits = view.logits(tokens)
        """
        with self.hooks({name: fn}):
            yield self

    @torch.no_grad()
    def residual_stack(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logits [B, T, V], residual stream [L+1, B, T, D]: the embedding output, then each block's output)."""
        logits, cache = self.run_with_cache(tokens)
        return logits, torch.stack([cache[n] for n in self.resid_names()])


# ---- building views ---------------------------------------------------------------------------


def view_of_nanolm(model: GPT, tokenizer: TokenizerLike | None = None, name: str = "", run_dir: Path | None = None) -> ModelView:
    bos = tokenizer.eos_id if tokenizer is not None else None  # the corpus separates documents with <eos>: a sentence follows one
    return ModelView(
        model,
        tokenizer,
        arch="nanolm",
        blocks=model.blocks,
        final_norm=model.ln_final,
        unembed=model.unembed,
        max_len=model.cfg.block_size,
        bos_id=bos,
        name=name,
        run_dir=run_dir,
    )


def _get(module: nn.Module, dotted: str) -> nn.Module:
    for part in dotted.split("."):
        module = getattr(module, part)
    return module


def view_of_hf(model: nn.Module, tokenizer: Any = None, name: str = "") -> ModelView:
    """A view of a Hugging Face causal LM (GPT2LMHeadModel, LlamaForCausalLM, GPTNeoXForCausalLM, or
    one laid out like them)."""
    model_type = getattr(model.config, "model_type", "?")
    layout = HF_LAYOUTS.get(model_type)
    candidates = [layout] if layout else list(HF_LAYOUTS.values())
    for blocks_path, norm_path in candidates:
        try:
            blocks, norm = _get(model, blocks_path), _get(model, norm_path)
        except AttributeError:
            continue
        break
    else:
        raise UserError(
            f"{name or model_type}: a {model_type!r} model is not supported; nanolm reads "
            f"{', '.join(HF_LAYOUTS)} and models laid out like them"
        )
    unembed = model.get_output_embeddings()
    cfg = model.config
    max_len = getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", None) or 2048
    hf_tok = HFTokenizer(tokenizer) if tokenizer is not None else None
    bos = None if hf_tok is None else hf_tok.bos_id
    return ModelView(
        model.eval(),
        hf_tok,
        arch=model_type,
        blocks=blocks,
        final_norm=norm,
        unembed=unembed,
        max_len=int(max_len),
        bos_id=bos,
        name=name,
    )


def view_of(model: nn.Module, tokenizer: Any = None, name: str = "") -> ModelView:
    """A view of a nanolm GPT or a Hugging Face causal LM."""
    if isinstance(model, GPT):
        return view_of_nanolm(model, tokenizer, name)
    if hasattr(model, "config") and hasattr(model, "get_output_embeddings"):
        return view_of_hf(model, tokenizer, name)
    raise UserError(f"{type(model).__name__} is neither a nanolm GPT nor a Hugging Face causal LM")


TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model", "tokenizer_config.json", "vocab.txt")


def has_tokenizer_files(folder: Path) -> bool:
    """Does a model folder hold a tokenizer (any sentencepiece *.model or *.tiktoken counts)?"""
    return any((folder / f).is_file() for f in TOKENIZER_FILES) or any(folder.glob("*.model")) or any(folder.glob("*.tiktoken"))


def load_view(ref: str | Path, runs_dir: str | Path = "runs", device: str = "cpu") -> ModelView:
    """A view of a nanolm run (a folder or a run name under runs_dir) or of a Hugging Face causal LM
    saved in a local folder (config.json and weights; its tokenizer files if present). Never downloads."""
    from ..runs import is_hf_model, resolve_run

    if is_hf_model(ref):
        return _load_hf_view(Path(ref), device)
    from ..checkpoint import load_trained_model

    run = resolve_run(ref, runs_dir)
    model, tok, _ = load_trained_model(run, device)
    return view_of_nanolm(model, tok, name=run.name, run_dir=run)


def _load_hf_view(path: Path, device: str) -> ModelView:
    try:
        import transformers
    except ImportError:
        raise UserError(f"{path} is a Hugging Face model; install the extra: pip install 'nanolm[hf]'") from None
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()  # "Loading weights" bars would precede any error line
    try:
        config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: not a readable Hugging Face model config ({str(e).splitlines()[0]})") from None
    if not any(a.endswith("ForCausalLM") or a.endswith("LMHeadModel") for a in (config.architectures or [])):
        raise UserError(f"{path}: not a causal LM (architectures: {config.architectures}); give a *ForCausalLM model")
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: could not load the model ({str(e).splitlines()[0]})") from None
    tokenizer = None
    if has_tokenizer_files(path):  # else AutoTokenizer may build an empty one
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError, TypeError):
            tokenizer = None
    if tokenizer is not None and len(tokenizer) > model.get_input_embeddings().num_embeddings:
        raise UserError(
            f"{path}: the tokenizer has {len(tokenizer):,} tokens but the model embeds only "
            f"{model.get_input_embeddings().num_embeddings:,}; save the model's own tokenizer beside it"
        )
    return view_of_hf(model.to(device), tokenizer, name=path.name)


def run_with_cache(
    model: nn.Module | ModelView, tokens: torch.Tensor, names: list[str] | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(logits [B, T, V], {hook name: activation}) for a nanolm GPT, a Hugging Face causal LM or a view."""
    view = model if isinstance(model, ModelView) else view_of(model)
    return view.run_with_cache(tokens, names)


@contextmanager
def edit_activation(model: nn.Module | ModelView, name: str, fn: EditFn) -> Iterator[ModelView]:
    """Replace one activation (fn's return value) during the forward passes of the with-block."""
    view = model if isinstance(model, ModelView) else view_of(model)
    with view.edit(name, fn):
        yield view
