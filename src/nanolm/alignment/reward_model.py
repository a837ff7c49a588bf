"""A Bradley–Terry reward model: a nanolm backbone plus a scalar head, trained on preference labels.

The model. A nanolm run's GPT (all of it trained) reads ``prompt + response``, after the run's start
token; the head is one linear map, r = w·h + b, from h [D], the final residual stream after the final
norm (``ln_final.hook_normalized``) at the text's last token (TRL's and OpenAI's reward models read the
last token too). Texts are right-padded in a batch; the model is causal, so padding never reaches a
text's last token. A text longer than the context keeps its last ``block_size`` tokens (the response
and the end of the prompt); the count is reported.

The loss. Under Bradley–Terry, P(chosen beats rejected) = σ(r_c − r_r). A label is soft: p, the
probability that chosen is better (``label_prob`` in [0.5, 1]; 0.5 a tie, 1 a sure verdict), and the
loss is the cross-entropy against it,

    L = −[p·log σ(r_c − r_r) + (1 − p)·log σ(r_r − r_c)]   (nats, mean over pairs),

which for p = 1 is the usual −log σ(r_c − r_r).

Pair accuracy: the share of pairs with r_c > r_r, over the pairs with a preference (p > 0.5; a tie
has no right answer); an exact tie r_c = r_r counts as wrong. Held out: the rows of a random share of
the ``pair_id``s, so a pair judged by several principles is all in train or all held out.

The labels file it reads and the biases it is measured for (reward vs length among equally correct answers;
agreeing-but-wrong answers against correct ones) are in ``reward_labels``, re-exported here.

Files. A reward model is a folder: ``reward_model.safetensors`` (the backbone's and head's tensors)
and ``reward_model.json`` (format, the backbone's config and tokenizer, the base run, the training
record and the weights' sha256). It is written in full to a sibling folder, then renamed into place.
No pickle: the weights load through safetensors, the rest is JSON.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError
from ..model import GPT, GPTConfig
from ..tensorfile import check_tensors_match_config, module_shapes, shapes_of
from ..tokenizers import Tokenizer
from .reward_labels import (  # noqa: F401 (some only re-exported: callers and tests import them from here)
    LABEL_FIELDS,
    META_FIELDS,
    AnswerMeta,
    Correlation,
    InheritedBias,
    PreferenceRow,
    RewardMean,
    ScoredAnswer,
    distinct_answers,
    file_sha256,
    inherited_bias,
    length_correlation,
    parse_label_row,
    read_labels,
    reward_mean,
)
from .stats import Rate, rate

FORMAT = "nanolm-reward-model-v1"
WEIGHTS = "reward_model.safetensors"
CONFIG = "reward_model.json"
RESIDUAL = "ln_final.hook_normalized"  # where the head reads


# ---- the model --------------------------------------------------------------------------------


class RewardModel(nn.Module):
    """r(text) = w·h + b, h [D] the backbone's final normalized residual at the text's last token."""

    def __init__(self, backbone: GPT, tokenizer: Tokenizer, name: str = "", base: dict | None = None) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(backbone.cfg.d_model, 1)
        self.tokenizer = tokenizer
        self.name = name  # the base run's name while training; the folder's once saved and loaded
        self.base = dict(base or {})  # the run it was built from: {"run", "name", "fingerprint"}
        self.record: dict[str, Any] = {}  # the training record, as saved

    @property
    def device(self) -> torch.device:
        return self.head.weight.device

    @property
    def max_len(self) -> int:
        return self.backbone.cfg.block_size

    def init_head(self, generator: torch.Generator) -> None:
        """Small random head (TRL's score head: normal, std 1/sqrt(D + 1)), bias 0: rewards start near 0."""
        with torch.no_grad():
            d = self.head.weight.shape[1]
            self.head.weight.copy_(torch.randn(self.head.weight.shape, generator=generator) / math.sqrt(d + 1))
            self.head.bias.zero_()

    def token_ids(self, text: str) -> tuple[list[int], bool]:
        """(ids after the start token, cut to the last block_size; whether it was cut)."""
        start = self.tokenizer.eos_id  # the corpus separates documents with <eos>
        ids = ([start] if start is not None else []) + self.tokenizer.encode(text)
        cut = len(ids) > self.max_len
        return ids[-self.max_len :], cut

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """ids [B, T] right-padded, lengths [B] -> rewards [B] (float32)."""
        _, cache = self.backbone.run_with_cache(ids, [RESIDUAL], detach=False)
        h = cache[RESIDUAL]  # [B, T, D]
        last = h[torch.arange(len(lengths), device=h.device), lengths - 1]  # [B, D]
        return self.head(last.float()).squeeze(-1)

    @torch.no_grad()
    def score_ids(self, ids: Sequence[Sequence[int]], batch_size: int = 64) -> np.ndarray:
        """Rewards [N] (float64) of token-id sequences (start token included)."""
        was_training = self.training
        self.eval()
        out = [self(*_padded(ids[i : i + batch_size], self.device)).double().cpu() for i in range(0, len(ids), batch_size)]
        self.train(was_training)
        return torch.cat(out).numpy() if out else np.zeros(0)

    def score(self, prompts: Sequence[str], responses: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Rewards [N] (float64) of prompt[i] + response[i]."""
        return self.score_ids([self.token_ids(p + r)[0] for p, r in zip(prompts, responses)], batch_size)


def _padded(batch: Sequence[Sequence[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [B, T] right-padded with 0, lengths [B])."""
    T = max(len(x) for x in batch)
    ids = torch.zeros(len(batch), T, dtype=torch.long)
    for i, x in enumerate(batch):
        ids[i, : len(x)] = torch.as_tensor(list(x), dtype=torch.long)
    return ids.to(device), torch.tensor([len(x) for x in batch], device=device)


def reward_model_from_run(
    run: str | Path, runs_dir: str | Path = "runs", device: str | torch.device = "cpu", seed: int = 0
) -> RewardModel:
    """A new reward model on a nanolm run's trained backbone (head: small random weights from seed)."""
    from ..checkpoint import load_trained_model
    from ..runs import is_hf_model, resolve_run, weights_fingerprint

    if is_hf_model(run):
        raise UserError(
            f"--base {run}: a Hugging Face model; the reward model's backbone is a nanolm run (give a run "
            "folder or a name under runs/)"
        )
    run_dir = resolve_run(run, runs_dir)
    backbone, tok, _ = load_trained_model(run_dir, device)
    base = {"run": str(run_dir), "name": run_dir.name, "fingerprint": weights_fingerprint(backbone.unembed.weight)}
    rm = RewardModel(backbone, tok, name=run_dir.name, base=base)
    rm.init_head(torch.Generator().manual_seed(seed))
    return rm.to(device)


# ---- loss and accuracy --------------------------------------------------------------------------


def bradley_terry_loss(r_chosen: torch.Tensor, r_rejected: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Mean soft-label Bradley–Terry loss (nats): −[p·log σ(r_c − r_r) + (1 − p)·log σ(r_r − r_c)]; each [N]."""
    d = r_chosen - r_rejected
    return -(p * F.logsigmoid(d) + (1 - p) * F.logsigmoid(-d)).mean()


def pair_accuracy(r_chosen: Sequence[float], r_rejected: Sequence[float], p: Sequence[float]) -> Rate:
    """Pairs with r_c > r_r / pairs with a preference (p > 0.5), Wilson 95% CI; a tie r_c = r_r is wrong."""
    rc, rr, pp = (np.asarray(x, dtype=np.float64) for x in (r_chosen, r_rejected, p))
    preferred = pp > 0.5
    return rate(int((rc[preferred] > rr[preferred]).sum()), int(preferred.sum()))


# ---- training ---------------------------------------------------------------------------------


@dataclass
class TrainSettings:
    steps: int = 300
    batch_size: int = 32  # pairs per step (2 × batch_size texts)
    lr: float = 1e-3  # AdamW; linear warm-up over the first 10% of steps, then linear decay to 0
    weight_decay: float = 0.0
    held_out: float = 0.2  # share of pair_ids held out
    seed: int = 0  # head init, the split, the batch order
    grad_clip: float = 1.0

    def check(self) -> None:
        if self.steps < 1:
            raise UserError(f"--steps must be at least 1, got {self.steps}")
        if self.batch_size < 1:
            raise UserError(f"--batch-size must be at least 1, got {self.batch_size}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise UserError(f"--lr must be a positive number, got {self.lr}")
        if not 0.0 <= self.held_out < 1.0:
            raise UserError(f"--held-out must be in [0, 1), got {self.held_out}")


@dataclass
class PairScores:
    """Rewards of a set of labels rows."""

    chosen: np.ndarray  # [N]
    rejected: np.ndarray  # [N]
    p: np.ndarray  # [N]

    @property
    def loss(self) -> float:
        """Mean soft Bradley–Terry loss, nats (NaN for no rows)."""
        if len(self.p) == 0:
            return math.nan
        d = self.chosen - self.rejected
        return float(-(self.p * _logsigmoid(d) + (1 - self.p) * _logsigmoid(-d)).mean())

    @property
    def accuracy(self) -> Rate:
        return pair_accuracy(self.chosen, self.rejected, self.p)


def _logsigmoid(x: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -x)


@dataclass
class RewardModelResult:
    """What training a reward model gives: the model, its held-out measures and the biases it inherited."""

    base: str  # the base run's name
    labels: str  # the labels file
    rows: int
    pairs: int  # distinct pair_ids
    train_rows: int
    held_out_rows: int
    held_out_pairs: int
    settings: TrainSettings
    loss_curve: list[float]  # training loss per step, nats
    train_loss: float  # over all training rows after training
    train_accuracy: Rate
    held_out_loss: float
    held_out_accuracy: Rate
    bias: InheritedBias | None  # on the held-out answers (None: nothing held out)
    principles: dict[str, int] = field(default_factory=dict)  # principle -> rows
    ties: int = 0  # rows with label_prob 0.5 (in the loss, not in the accuracy)
    truncated: int = 0  # texts longer than the context, cut to their last block_size tokens
    unknown_words: list[str] = field(default_factory=list)  # words outside the base's vocabulary (read as <unk>)
    notes: list[str] = field(default_factory=list)
    model: RewardModel | None = field(default=None, repr=False)

    def summary(self) -> dict[str, Any]:
        """Everything but the model, as plain values."""
        d = {k: v for k, v in self.__dict__.items() if k != "model"}
        return json.loads(json.dumps(_plain(d)))


def _plain(obj: Any) -> Any:
    """Dataclasses and numpy values as JSON values; non-finite floats as None."""
    if hasattr(obj, "__dataclass_fields__"):
        return _plain(asdict(obj))
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        return float(obj) if math.isfinite(float(obj)) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def split_by_pair(rows: Sequence[PreferenceRow], held_out: float, seed: int) -> tuple[list[PreferenceRow], list[PreferenceRow]]:
    """(train rows, held-out rows): round(held_out · pair_ids) of the distinct pair_ids, drawn with seed, and all
    their rows held out (at least one pair when held_out > 0 and there are two or more pairs)."""
    ids = sorted({r.pair_id for r in rows})
    k = int(round(held_out * len(ids)))
    if held_out > 0 and len(ids) >= 2:
        k = min(max(k, 1), len(ids) - 1)
    rng = np.random.default_rng(seed)
    held = {ids[i] for i in rng.permutation(len(ids))[:k]}
    return [r for r in rows if r.pair_id not in held], [r for r in rows if r.pair_id in held]


def score_rows(rm: RewardModel, rows: Sequence[PreferenceRow], batch_size: int = 64) -> PairScores:
    chosen = rm.score([r.prompt for r in rows], [r.chosen for r in rows], batch_size)
    rejected = rm.score([r.prompt for r in rows], [r.rejected for r in rows], batch_size)
    return PairScores(chosen, rejected, np.array([r.label_prob for r in rows], dtype=np.float64))


def _lr_at(step: int, settings: TrainSettings) -> float:
    """Linear warm-up over the first 10% of steps, then linear decay to 0 at the last."""
    warm = max(1, settings.steps // 10)
    if step < warm:
        return settings.lr * (step + 1) / warm
    return settings.lr * max(0.0, (settings.steps - step) / max(1, settings.steps - warm))


def _tokenized(rm: RewardModel, rows: Sequence[PreferenceRow]) -> tuple[list[list[int]], list[list[int]], int]:
    """(chosen ids, rejected ids, texts cut to the context)."""
    chosen, rejected, cut = [], [], 0
    for r in rows:
        c, cc = rm.token_ids(r.prompt + r.chosen)
        j, jc = rm.token_ids(r.prompt + r.rejected)
        chosen.append(c)
        rejected.append(j)
        cut += int(cc) + int(jc)
    return chosen, rejected, cut


def fit(
    rm: RewardModel,
    rows: Sequence[PreferenceRow],
    settings: TrainSettings,
    progress: Callable[[int, int, float], None] | None = None,
) -> list[float]:
    """Train rm in place on rows with AdamW; the loss (nats) of each step's batch. progress(step, steps, loss)
    after each step. Batches are drawn without replacement, a new permutation per pass over the rows."""
    chosen, rejected, _ = _tokenized(rm, rows)
    p = torch.tensor([r.label_prob for r in rows], dtype=torch.float32)
    opt = torch.optim.AdamW(rm.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    gen = torch.Generator().manual_seed(settings.seed)
    order: list[int] = []
    losses = []
    rm.train()
    for step in range(settings.steps):
        if len(order) < min(settings.batch_size, len(rows)):
            order += torch.randperm(len(rows), generator=gen).tolist()
        batch, order = order[: settings.batch_size], order[settings.batch_size :]
        ids, lengths = _padded([chosen[i] for i in batch] + [rejected[i] for i in batch], rm.device)
        r = rm(ids, lengths)  # [2B]: the chosen texts, then the rejected ones
        loss = bradley_terry_loss(r[: len(batch)], r[len(batch) :], p[batch].to(r.device))
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, settings)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(rm.parameters(), settings.grad_clip)
        opt.step()
        losses.append(float(loss.detach()))
        if progress is not None:
            progress(step + 1, settings.steps, losses[-1])
    rm.eval()
    return losses


def measure_bias(rm: RewardModel, rows: Sequence[PreferenceRow], batch_size: int = 64) -> InheritedBias:
    """The inherited biases, on the distinct answers of rows."""
    answers = distinct_answers(rows)
    rewards = rm.score([a[0] for a in answers], [a[1] for a in answers], batch_size)
    return inherited_bias([ScoredAnswer(p, resp, m, float(r)) for (p, resp, m), r in zip(answers, rewards)])


def train_reward_model(
    rm: RewardModel,
    rows: Sequence[PreferenceRow],
    settings: TrainSettings | None = None,
    labels: str = "",
    progress: Callable[[int, int, float], None] | None = None,
) -> RewardModelResult:
    """Split rows by pair_id, train rm on the training share, and measure it on both shares."""
    settings = settings or TrainSettings()
    settings.check()
    train, held = split_by_pair(rows, settings.held_out, settings.seed)
    notes = []
    if not train:
        raise UserError(f"{labels or 'the labels'}: no rows left to train on after holding out pairs; lower --held-out")
    if not held:
        notes.append("nothing held out (one pair, or --held-out 0): held-out accuracy and the biases are not measured")
    tok = rm.tokenizer
    words = list(dict.fromkeys(w for r in rows for t in (r.prompt, r.chosen, r.rejected) for w in tok.unknown_words(t)))
    _, _, truncated = _tokenized(rm, rows)
    losses = fit(rm, train, settings, progress)
    tr = score_rows(rm, train)
    ho = score_rows(rm, held)
    bias = measure_bias(rm, held) if held else None
    ties = sum(r.label_prob == 0.5 for r in rows)
    if tr.accuracy.n == 0:
        notes.append("every training label is a tie (label_prob 0.5): the model learned no preference")
    principles: dict[str, int] = {}
    for r in rows:
        principles[r.principle] = principles.get(r.principle, 0) + 1
    result = RewardModelResult(
        rm.name,
        labels,
        len(rows),
        len({r.pair_id for r in rows}),
        len(train),
        len(held),
        len({r.pair_id for r in held}),
        settings,
        losses,
        tr.loss,
        tr.accuracy,
        ho.loss,
        ho.accuracy,
        bias,
        principles,
        ties,
        truncated,
        words,
        notes,
        rm,
    )
    rm.record = {
        "labels": labels,
        "labels_sha256": file_sha256(labels) if labels and Path(labels).is_file() else None,
        **{k: v for k, v in result.summary().items() if k not in ("loss_curve",)},
    }
    return result


# ---- files -------------------------------------------------------------------------------------


def _tensors(rm: RewardModel) -> dict[str, torch.Tensor]:
    # clone: tied weights share storage, which safetensors refuses; a copy per name loads back the same
    return {name: t.detach().float().cpu().contiguous().clone() for name, t in rm.state_dict().items()}


def is_reward_model_folder(folder: Path) -> bool:
    return (folder / CONFIG).is_file() and (folder / WEIGHTS).is_file()


def check_output_folder(folder: str | Path, force: bool = False) -> Path:
    """folder as a Path, once a reward model can be saved there; else a UserError (before any work): a file; a
    folder of other files; a reward model already (unless force); nowhere writable."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise UserError(f"--out {folder} is a file; a reward model is a folder: give a folder")
    if folder.is_dir():
        present = {p.name for p in folder.iterdir()}
        others = sorted(present - {CONFIG, WEIGHTS})
        if others:
            raise UserError(
                f"{folder} holds files that are not a reward model's ({', '.join(others[:3])}); give a new "
                "or empty folder with --out FOLDER"
            )
        if present and not force:
            raise UserError(f"{folder} already holds a reward model; add --force to replace it, or give --out FOLDER")
    parent = folder.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not os.access(parent, os.W_OK) or (folder.is_dir() and not os.access(folder, os.W_OK)):
        raise UserError(f"cannot write the reward model to {folder}: {parent} is read-only; give another --out FOLDER")
    return folder


def save_reward_model(rm: RewardModel, folder: str | Path, force: bool = False) -> Path:
    """Write rm (weights, then the JSON that names their sha256) to a new sibling folder and rename it into place;
    an existing reward model there (force) is moved aside first and removed after. The folder."""
    from safetensors.torch import save as to_bytes

    from ..io import atomic_write_bytes, atomic_write_json, install_folder, staging_folder

    folder = Path(folder)
    staging = staging_folder(folder)
    try:
        data = to_bytes(_tensors(rm))
        atomic_write_bytes(staging / WEIGHTS, data)
        config = {
            "format": FORMAT,
            "base": rm.base,
            "model_config": rm.backbone.cfg.to_dict(),
            "tokenizer": rm.tokenizer.to_dict(),
            "head": f"linear on {RESIDUAL} at the last token",
            "training": rm.record,
            "sha256": {WEIGHTS: hashlib.sha256(data).hexdigest()},
        }
        atomic_write_json(staging / CONFIG, _plain(config))
        check_output_folder(folder, force)  # again: the folder may have changed while training
        install_folder(staging, folder)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return folder


def _read_config(folder: Path) -> dict:
    if not folder.is_dir() or not is_reward_model_folder(folder):
        raise UserError(
            f"{folder}: not a reward model folder (needs {CONFIG} and {WEIGHTS}); train one with "
            "nanolm feedback reward-model LABELS --base RUN"
        )
    try:
        raw = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{folder / CONFIG}: not valid JSON ({type(e).__name__}); the reward model is damaged") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        got = raw.get("format") if isinstance(raw, dict) else None
        raise UserError(
            f"{folder / CONFIG}: not a {FORMAT} file (format={got!r}); give a folder that nanolm feedback reward-model wrote"
        )
    return raw


def load_reward_model(folder: str | Path, device: str | torch.device = "cpu") -> RewardModel:
    """A saved reward model in eval mode; a UserError naming the file when the folder is not one, or is damaged."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    from ..tokenizers import tokenizer_from_dict

    folder = Path(folder)
    raw = _read_config(folder)
    data = (folder / WEIGHTS).read_bytes()
    expected = (raw.get("sha256") or {}).get(WEIGHTS)
    if expected is not None and hashlib.sha256(data).hexdigest() != expected:
        raise UserError(
            f"{folder / WEIGHTS}: sha256 differs from the one recorded when it was written; train the reward model again"
        )
    try:
        cfg = GPTConfig(**raw["model_config"])
        tok = tokenizer_from_dict(raw["tokenizer"])
        tensors = load(data)
    except (KeyError, TypeError, ValueError, SafetensorError) as e:
        raise UserError(
            f"{folder}: damaged reward model ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); train it again"
        ) from None
    expected = module_shapes(lambda: RewardModel(GPT(cfg), tok))
    described = f"{CONFIG}'s model_config ({cfg.sizes()})"
    check_tensors_match_config(folder / WEIGHTS, shapes_of(tensors), expected, described, "train the reward model again")
    rm = RewardModel(GPT(cfg), tok, name=folder.name, base=raw.get("base") or {})
    rm.record = raw.get("training") or {}
    bad = [k for k, v in tensors.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise UserError(f"{folder / WEIGHTS}: {bad[0]} holds NaN or infinite values; train the reward model again")
    rm.load_state_dict(tensors)
    return rm.to(device).eval()
