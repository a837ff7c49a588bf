"""Steering: add α·v̂ to the residual stream at one layer while the model generates, h ← h + α·v̂.

Where. Layer L means the hook ``blocks.L.hook_resid_post``: the output of block L, what block L + 1 reads
(layer "embed" is ``blocks.0.hook_resid_pre``, the embedding output), as in the lens and the probes. The
vector is added at every position: the start token, the prompt and each generated token, with the KV
cache or without it. With the cache the prompt's positions are steered once, when they are first computed,
and each step steers its one new position, so cached and uncached generation see the same edited
activations (steering-vectors #60 edited by token index, which breaks when a cached step has length 1;
CAA #3 left the first generated token unsteered; the tests compare both ways).

The direction v (``build_directions``), one per layer:
- ``sentiment``, ``tense``: the corpus's labelled sets (``probes.feature_dataset``): the mean activation of
  the positive class (happy; past) minus the negative class's (sad; present), each text read at its last
  token (CAA and steering-vectors read the last token too); means taken in float64;
- a file (JSONL or CSV): contrastive pairs, rows ``{"prompt", "positive", "negative"}`` (CAA's
  ``question``, ``answer_matching_behavior``, ``answer_not_matching_behavior`` are read as the same), read at
  the last token of prompt + completion; or labelled texts, rows ``{"text", "label"}`` with exactly two
  labels, the first row's label the positive class (optional ``target``, ``contrast`` columns give options
  to score, as for the probes);
- ``sae:FOLDER:F``: row F of a sparse autoencoder's decoder, `W_dec[F]` `[D]`, at the SAE's own hook.

α's unit. With ``scale="residual"`` (the default) v is rescaled to the mean residual norm r̄ at its hook:
v̂ = v · r̄ / ‖v‖, so α = 1 adds a vector as long as the typical residual there, at any layer of any model
(CAA likewise rescales its vectors to a common norm). r̄ is the mean over tokens of ‖h‖₂ on ``neutral_texts``
(the start token left out: a constant input whose residual norm is often an outlier). With ``scale="raw"``
v̂ = v and α multiplies the raw mean difference (ActAdd's and steering-vectors' convention). Either way the
result reports ‖v‖, r̄ and ‖α·v̂‖.

Generation (common random numbers, the KV cache, the stop token) is nanolm.interp.generate's: a steered row and
the unsteered row of the same prompt and seed draw the same uniforms, so a difference between them is the
steering's, not the sampler's.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import torch

from ..errors import UserError

# Generation lives in nanolm.generate and nanolm.interp.generate; its names stay importable from here.
from ..generate import CRN_STRIDE as CRN_STRIDE
from ..generate import row_uniforms as row_uniforms
from .generate import UNSTEERED, GenRow, Setting, check_sampling, decode, generate
from .generate import ViewDecoder as _Decoder  # noqa: F401 (the tests drive it step by step)
from .generate import steered as steered
from .generate import stop_token as stop_token
from .view import ModelView

SCALES = ("residual", "raw")
BUILTIN = {"sentiment": ("happy", "sad"), "tense": ("past", "present")}  # (positive, negative) class
NEUTRAL_SEED = 12345  # corpus seed of the neutral texts: not a seed a run trains on by default


# ---- what the direction is made of --------------------------------------------------------------


@dataclass
class ContrastSet:
    """Texts of two classes; the direction is mean(positive) - mean(negative) at their last tokens.

    pairs: (prompt, positive option, negative option) triples whose p(matching) the sweep scores, when the
    set has options (tense; a pairs file; a labelled file with target and contrast columns)."""

    name: str  # "sentiment", "tense", or a file's stem
    positive: str  # the positive class's name ("happy")
    negative: str
    positive_texts: list[list[int]] | list[str]
    negative_texts: list[list[int]] | list[str]
    pairs: list[tuple[str, str, str]] | None = None
    source: str = ""  # the file it was read from; "" for a built-in set


def join_option(prompt: str, option: str) -> str:
    """prompt followed by option, with one space between unless either side already has it."""
    if not prompt or prompt[-1].isspace() or option[:1].isspace():
        return prompt + option
    return f"{prompt} {option}"


def contrast_set(spec: str, n: int = 200, seed: int = 0) -> ContrastSet:
    """The built-in set "sentiment" or "tense" (n texts, classes balanced), or a file's (every row)."""
    from .probes import feature_dataset

    if spec in BUILTIN:
        pos, neg = BUILTIN[spec]
        data = feature_dataset(spec, n, seed)
        pairs = None
        if spec == "tense":  # scored on other sentences than the direction is read from
            held = feature_dataset(spec, n, seed + 1)
            pairs = _pairs_from_targets(held.texts, held.labels, held.targets, held.contrasts, pos)
        return ContrastSet(
            spec,
            pos,
            neg,
            [t for t, y in zip(data.texts, data.labels) if y == pos],
            [t for t, y in zip(data.texts, data.labels) if y == neg],
            pairs,
        )
    path = Path(spec)
    if path.suffix.lower() not in (".jsonl", ".csv", ".json"):
        raise UserError(
            f"unknown direction {spec!r}; give sentiment, tense, a pairs file (FILE.jsonl or FILE.csv) or sae:SAE_FOLDER:FEATURE"
        )
    if not path.is_file():
        raise UserError(f"--direction {spec}: no such file")
    return read_pairs_file(path)


def _pairs_from_targets(
    texts: list[str], labels: list[str], targets: list[str] | None, contrasts: list[str] | None, positive: str
) -> list[tuple[str, str, str]] | None:
    """(text, the positive class's option, the negative class's option): a row of the positive class has its
    target as the positive option; a row of the other class has it as the negative one."""
    if targets is None or contrasts is None:
        return None
    return [(t, a, b) if y == positive else (t, b, a) for t, y, a, b in zip(texts, labels, targets, contrasts)]


PAIR_KEYS = (("prompt", "positive", "negative"), ("question", "answer_matching_behavior", "answer_not_matching_behavior"))


def read_pairs_file(path: Path) -> ContrastSet:
    """A contrastive pairs file (prompt, positive, negative per row; CAA's key names accepted) or a labelled
    one (text, label; two labels); every malformed row is a UserError naming the file and the line."""
    from .probes import _read_rows, read_labelled_file

    try:
        rows, columns = _read_rows(path)
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {e.start}); save the file as UTF-8") from None
    if not rows:
        raise UserError(
            f'{path}: no rows; give one pair per line, e.g. {{"prompt": "the cat felt", "positive": "happy", "negative": "sad"}}'
        )
    keys = next((k for k in PAIR_KEYS if k[1] in columns or k[2] in columns), None)
    if keys is None:
        if "text" in columns or "label" in columns:
            return _labelled_contrast(read_labelled_file(path))
        raise UserError(
            f"{path}: no 'positive' and 'negative' columns (columns: {', '.join(columns) or 'none'}); give "
            'rows {"prompt": ..., "positive": ..., "negative": ...}, or text and label columns'
        )
    prompt_key, pos_key, neg_key = keys
    pairs = []
    for line, row in rows:
        for key in (pos_key, neg_key):
            if not isinstance(row.get(key), str) or not row[key].strip():
                missing = "no" if row.get(key) in (None, "") else "a non-text"
                raise UserError(
                    f"{path}:{line}: {missing} {key!r} value; every row needs both completions "
                    f"({pos_key!r} and {neg_key!r}), a direction needs both classes"
                )
        prompt = row.get(prompt_key) or ""
        if not isinstance(prompt, str):
            raise UserError(f"{path}:{line}: {prompt_key!r} is not text")
        if row[pos_key].strip() == row[neg_key].strip():
            raise UserError(
                f"{path}:{line}: {pos_key!r} and {neg_key!r} are the same ({row[pos_key]!r}): the pair contrasts nothing"
            )
        pairs.append((prompt, row[pos_key], row[neg_key]))
    return ContrastSet(
        path.stem,
        pos_key,
        neg_key,
        [join_option(p, a) for p, a, _ in pairs],
        [join_option(p, b) for p, _, b in pairs],
        [t for t in pairs if t[0].strip()] or None,
        str(path),
    )


def _labelled_contrast(data) -> ContrastSet:
    """A labelled set (probes.LabelledSet) as a contrast: two labels, the first row's the positive one."""
    classes = list(dict.fromkeys(data.labels))
    if len(classes) != 2:
        what = f"one label ({classes[0]!r})" if len(classes) == 1 else f"{len(classes)} labels ({', '.join(classes[:5])})"
        raise UserError(f"{data.source}: {what}; a direction is the difference of exactly two classes")
    pos, neg = classes
    return ContrastSet(
        data.name,
        pos,
        neg,
        [t for t, y in zip(data.texts, data.labels) if y == pos],
        [t for t, y in zip(data.texts, data.labels) if y == neg],
        _pairs_from_targets(data.texts, data.labels, data.targets, data.contrasts, pos),
        data.source,
    )


# ---- the direction ----------------------------------------------------------------------------------


@dataclass
class DirectionInfo:
    """What a direction is, without the vector (what the JSON output carries)."""

    name: str  # "sentiment: happy − sad", "SAE L1-resid_post-relu latent 12"
    layer: str  # "0", "1", ... or "embed"
    hook: str  # "blocks.1.hook_resid_post"
    scale: str  # "residual" or "raw": what α multiplies (see the module docstring)
    raw_norm: float  # ‖v‖
    resid_norm: float  # r̄: mean ‖h‖₂ over the neutral texts' tokens at the hook (start token left out)
    unit_norm: float  # ‖v̂‖: r̄ for scale "residual", ‖v‖ for "raw"
    n_positive: int = 0  # texts averaged per class (0 for an SAE row)
    n_negative: int = 0
    source: str = ""

    @property
    def ratio(self) -> float:
        """‖v‖ / r̄."""
        return self.raw_norm / self.resid_norm if self.resid_norm > 0 else math.nan

    def added_norm(self, alpha: float) -> float:
        """‖α·v̂‖, in the residual's units."""
        return abs(alpha) * self.unit_norm


@dataclass
class Direction:
    info: DirectionInfo
    vector: torch.Tensor  # v [D] float32 on the model's device, before any rescaling

    @property
    def unit(self) -> torch.Tensor:
        """v̂ [D]: what α multiplies."""
        if self.info.scale == "raw" or self.info.raw_norm == 0:
            return self.vector
        return self.vector * (self.info.resid_norm / self.info.raw_norm)


@lru_cache(maxsize=4)
def _neutral_lines(n: int) -> tuple[str, ...]:
    from ..corpus import generate_corpus

    words = sentiment_lexicon()
    lexicon = words[0] | words[1]
    lines = [line for line in generate_corpus(max(400, 8 * n), NEUTRAL_SEED).lines if not lexicon & set(line.split())]
    return tuple(lines[:n])


def neutral_texts(view: ModelView, n: int = 64) -> list[list[int]]:
    """Token ids of n corpus lines with no sentiment word (``sentiment_lexicon``), after the start token, cut to
    the model's context: ordinary text for the fluency KL and the mean residual norm."""
    if view.tokenizer is None:
        view.to_tokens("")  # the view's own "no tokenizer" error
    start = [view.bos_id] if view.bos_id is not None else []
    return [(start + view.tokenizer.encode(line))[: view.max_len] for line in _neutral_lines(n)]


@torch.no_grad()
def mean_resid_norms(
    view: ModelView, hooks: Sequence[str], texts: Sequence[Sequence[int]], batch_size: int = 64
) -> dict[str, float]:
    """{hook: r̄}, r̄ the mean over the texts' tokens of ‖h‖₂ at the hook; position 0 is left out when the view
    puts a start token there."""
    from .activations import iter_batches

    sums = dict.fromkeys(hooks, 0.0)
    count = 0
    first = 1 if view.bos_id is not None else 0
    for batch in iter_batches(list(texts), batch_size, view.device):
        _, cache = view.run_with_cache(batch.ids, list(hooks))
        mask = batch.mask.clone()
        mask[:, :first] = False
        count += int(mask.sum())
        for hook in hooks:
            sums[hook] += float(cache[hook].double().norm(dim=-1)[mask].sum())
    return {hook: s / max(count, 1) for hook, s in sums.items()}


def parse_sae_spec(spec: str) -> tuple[Path, int]:
    """ "sae:FOLDER:F" -> (FOLDER, F)."""
    body = spec[len("sae:") :]
    folder, sep, feature = body.rpartition(":")
    if not sep or not folder:
        raise UserError(f"--direction {spec}: give sae:SAE_FOLDER:FEATURE, e.g. sae:runs/x/sae/L1-resid_post-relu:12")
    try:
        return Path(folder), int(feature)
    except ValueError:
        raise UserError(f"--direction {spec}: the feature {feature!r} is not an integer") from None


def build_directions(
    view: ModelView,
    spec: str,
    layers: Sequence[str],
    scale: str = "residual",
    n: int = 200,
    seed: int = 0,
    contrast: ContrastSet | None = None,
) -> dict[str, Direction]:
    """{layer label: Direction} for each layer ("0", "1", ..., "embed"), from spec: "sentiment", "tense", a pairs
    file, or "sae:FOLDER:F" (which lives at its SAE's hook: layers must be that one layer)."""
    if scale not in SCALES:
        raise UserError(f"--scale {scale!r}: give one of {', '.join(SCALES)}")
    if spec.startswith("sae:"):
        return {_layer_label(d.info.layer): d for d in [_sae_direction(view, spec, layers, scale)]}
    contrast = contrast or contrast_set(spec, n, seed)
    hooks = {}
    for layer in layers:
        hook = view.resid_name(layer)  # a UserError naming the model's layers when out of range
        hooks[_layer_label(layer)] = hook
    if not hooks:
        raise UserError("no layer to steer at; give --layer")
    from .activations import collect

    pos = collect(view, contrast.positive_texts, list(hooks.values()), pool="last")
    neg = collect(view, contrast.negative_texts, list(hooks.values()), pool="last")
    norms = mean_resid_norms(view, list(hooks.values()), neutral_texts(view))
    out = {}
    for layer, hook in hooks.items():
        v = (pos[hook].double().mean(0) - neg[hook].double().mean(0)).float()  # [D]
        name = f"{contrast.name}: {contrast.positive} − {contrast.negative}"
        info = DirectionInfo(
            name,
            layer,
            hook,
            scale,
            float(v.norm()),
            norms[hook],
            0.0,
            len(contrast.positive_texts),
            len(contrast.negative_texts),
            contrast.source,
        )
        info.unit_norm = info.resid_norm if scale == "residual" else info.raw_norm
        out[layer] = Direction(info, v.to(view.device))
    return out


def _layer_label(layer: str | int) -> str:
    """ "1" -> "1", "-1" and "embed" -> "embed" (checked by view.resid_name first)."""
    return "embed" if str(layer).strip() in ("embed", "-1") else str(int(layer))


def _sae_direction(view: ModelView, spec: str, layers: Sequence[str], scale: str) -> Direction:
    from .sae.pipeline import layer_of, load_sae_for

    folder, feature = parse_sae_spec(spec)
    if not folder.is_dir():
        raise UserError(f"--direction {spec}: no SAE folder {folder}")
    sae = load_sae_for(view, folder)
    if not 0 <= feature < sae.cfg.d_sae:
        raise UserError(f"--direction {spec}: feature {feature} is out of range; this SAE has 0..{sae.cfg.d_sae - 1}")
    hook = sae.cfg.hook_name
    layer = str(layer_of(hook))
    if any(str(x).strip() != layer for x in layers):
        raise UserError(
            f"--direction {spec}: the SAE reads {hook}, so its direction steers at layer {layer}; "
            f"give --layer {layer} (or leave --layer out)"
        )
    v = sae.W_dec[feature].detach().float()
    r = mean_resid_norms(view, [hook], neutral_texts(view))[hook]
    info = DirectionInfo(
        f"SAE {folder.name} latent {feature}",
        layer,
        hook,
        scale,
        float(v.norm()),
        r,
        r if scale == "residual" else float(v.norm()),
        source=str(folder),
    )
    return Direction(info, v.to(view.device))


def sae_layer(spec: str) -> str | None:
    """The layer an "sae:FOLDER:F" direction lives at (from its cfg.json, without loading the weights), else None."""
    if not spec.startswith("sae:"):
        return None
    folder, _ = parse_sae_spec(spec)
    try:
        hook = json.loads((folder / "cfg.json").read_text())["hook_name"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"--direction {spec}: {folder} is not an SAE folder (no readable cfg.json)") from None
    m = re.match(r"blocks\.(\d+)\.", hook)
    if m is None:
        raise UserError(f"--direction {spec}: the SAE's hook {hook!r} is not a block's")
    return m.group(1)


# ---- steered forward passes --------------------------------------------------------------------------

# ---- nanolm steer: one setting, steered beside unsteered ----------------------------------------------


@dataclass
class SteerSample:
    prompt: str
    unsteered: str  # the generated text only
    steered: str
    unsteered_tokens: list[int] = field(default_factory=list)
    steered_tokens: list[int] = field(default_factory=list)


@dataclass
class SteerResult:
    model: str
    direction: DirectionInfo
    alpha: float
    added_norm: float  # ‖α·v̂‖
    seed: int
    temperature: float
    top_k: int | None
    max_new_tokens: int
    use_cache: bool
    samples: list[SteerSample]


def parse_alpha(text: str | float, what: str = "--alpha") -> float:
    """A finite number, or a UserError naming what was given."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise UserError(f"{what} {text!r} is not a number; give e.g. {what} 2") from None
    if not math.isfinite(value):
        raise UserError(f"{what} {text!r} is not a finite number")
    return value


def steer(
    view: ModelView,
    direction: Direction,
    alpha: float,
    prompts: Sequence[str],
    max_new_tokens: int = 20,
    seed: int = 0,
    temperature: float = 0.8,
    top_k: int | None = 20,
    use_cache: bool = True,
) -> SteerResult:
    """Each prompt's continuation unsteered and with α·v̂ added at the direction's hook, from the same seed."""
    check_sampling(temperature, top_k)
    if not prompts:
        raise UserError("no prompt; give one with -p")
    ids = [view.to_tokens(p)[0].tolist() for p in prompts]
    setting = Setting(direction.info.hook, alpha)
    rows = [GenRow(i, seed, s) for i in range(len(prompts)) for s in (UNSTEERED, setting)]
    texts = generate(view, ids, rows, {direction.info.hook: direction.unit}, max_new_tokens, temperature, top_k, use_cache)
    samples = [
        SteerSample(p, decode(view, texts[2 * i]), decode(view, texts[2 * i + 1]), texts[2 * i], texts[2 * i + 1])
        for i, p in enumerate(prompts)
    ]
    return SteerResult(
        view.name,
        direction.info,
        alpha,
        direction.info.added_norm(alpha),
        seed,
        temperature,
        top_k,
        max_new_tokens,
        use_cache,
        samples,
    )


# ---- the corpus's sentiment words ------------------------------------------------------------------


@lru_cache(maxsize=1)
def sentiment_lexicon() -> tuple[frozenset[str], frozenset[str]]:
    """(happy words, sad words): the words of the corpus's happy lists (HAPPY_WORDS, HAPPY_REASONS,
    HAPPY_ENDINGS) that appear in no sad list, and the reverse, less any word the corpus's other sentences use
    ("saw", "old", "the"): each word left marks its side wherever it appears in the corpus.

    Why not the sentiment adjectives alone: the corpus draws the adjective after "felt" 50/50, independently of
    everything before it, so no activation precedes the choice; what a sentiment direction can change is the rest
    of the sentence (the reasons and endings), which the corpus ties to its sentiment."""
    from ..corpus import HAPPY_ENDINGS, HAPPY_REASONS, HAPPY_WORDS, SAD_ENDINGS, SAD_REASONS, SAD_WORDS, generate_corpus

    happy = {w for p in HAPPY_WORDS + HAPPY_REASONS + HAPPY_ENDINGS for w in p.split()}
    sad = {w for p in SAD_WORDS + SAD_REASONS + SAD_ENDINGS for w in p.split()}
    phrases = HAPPY_WORDS + HAPPY_REASONS + HAPPY_ENDINGS + SAD_WORDS + SAD_REASONS + SAD_ENDINGS
    other: set[str] = set()
    for line in generate_corpus(4000, NEUTRAL_SEED).lines:
        padded = f" {line} "
        if not any(f" {p} " in padded for p in phrases):  # a line of another kind
            other.update(line.split())
    return frozenset(happy - sad - other), frozenset(sad - happy - other)


def words_of(text: str) -> list[str]:
    """Lower-case words of a generated text (letters and apostrophes)."""
    return re.findall(r"[a-z']+", text.lower())
