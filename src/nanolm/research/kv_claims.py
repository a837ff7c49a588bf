"""Check the "LowKV" claim on a real model by measurement: "compress the KV cache 8 times losslessly, as
guaranteed by the Eckart–Young theorem" (the reference, Part 3).

The three questions for any paper, the first two answered with numbers:

1. Are the theorem's conditions met? The theorem says that truncated SVD gives the best approximation of
   the key matrix at a given rank, not that this approximation is good. Measured: the spectral energy
   Σ_{i≤r} σᵢ² / Σ σᵢ² of K and V per layer and head, the rank needed for 70%, 90% and 99%, and what a
   rank-r K does after softmax (KL between the exact and approximate attention, queries whose most
   attended key changes, relative error of the attention output) and to the model's loss.
2. Do the baselines get the same information? Every compression here stores the same held-out context;
   they differ only in how, compared at equal memory (bytes per token per layer): low rank, cache
   quantization (keys per channel, values per token) and grouped-query sharing.
3. Is there prior work? MLA (DeepSeek-V2), GQA, KIVI / KVQuant: named, with a note field for the reader.

"Lossless" is judged against the noise of the evaluation itself: the standard error of the model's loss
over the evaluation sequences, from a bootstrap (resampling the sequences: another sample of held-out text
would move the loss by about that much). A compression is lossless here iff |Δloss| ≤ 2 SE. Each Δloss also
gets a paired bootstrap 95% interval (the same sequences with and without compression), which can exclude 0
for a change far below the evaluation noise.

Every compression is applied to every layer at once when the loss is measured (as a compressed cache
would be); the errors after softmax are measured per layer, with that layer's input exact. The rank
method's bases are fitted on the very tokens they compress: the most favourable case for the claim.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..errors import UserError
from ..io import atomic_write_json, to_jsonable
from ..model import GPT
from ..records import Record
from ..tokenizers import TokenizerLike
from .kv_attention import (
    AttentionErrors,
    attention_output,
    exact_attention,
    recorded_qkv,
    sequence_losses,
    split_heads,
)
from .kv_compress import (
    ENERGY_LEVELS,
    FAMILIES,
    CacheShape,
    Compression,
    check_compressions,
    compressor,
    energy_kept,
    gram,
    projectors,
    rank_needed,
    spectrum,
)

N_BOOT = 2000
# The errors after softmax are means over queries: 8 sequences of 256 tokens give 2,048 queries per head and
# layer, plenty for a mean, at an eighth of the cost of 64 (each costs three attentions per compression).
ATTENTION_SEQUENCES = 8
PRIOR_WORK = (
    "A low-rank latent instead of the full KV already exists: MLA (DeepSeek-V2, 2024) learns one in "
    "training. Grouped-query attention (Ainslie et al. 2023) shares keys and values between heads; KIVI "
    "(Liu et al. 2024) and KVQuant (Hooper et al. 2024) quantize keys per channel and values per token. "
    "So the novelty lies elsewhere, and the paper has to say where."
)
QUESTIONS = ("Are the theorem's conditions met?", "Do the baselines get the same information?", "Is there prior work?")

Progress = Callable[[int, int], None]


# ---- the report ---------------------------------------------------------------------------------


@dataclass
class SpectrumRow:
    """One layer's spectral energy at each rank of the report (fractions), over its heads."""

    layer: int
    k_energy: list[float]  # mean over heads, one per rank
    k_energy_min: list[float]  # the head that keeps least
    v_energy: list[float]
    v_energy_min: list[float]
    k_rank_needed: dict[str, int]  # "70%" -> the largest rank any head needs for 70% of its energy
    v_rank_needed: dict[str, int]
    k_energy_heads: list[list[float]]  # [head][rank]
    v_energy_heads: list[list[float]]


@dataclass
class AttentionRow:
    """One layer under one compression, that layer's input exact."""

    layer: int
    method: str
    kl: float  # KL(exact ‖ approximate attention), nats, mean over heads, sequences and query positions
    kl_max_head: float  # the head with the largest mean KL
    argmax_flips: float  # share of queries whose most attended key changes
    key_error: float  # ‖K̂ − K‖ / ‖K‖ over the layer
    output_error: float  # ‖ŷ − y‖ / ‖y‖ of the attention output (after the output projection)
    kl_heads: list[float]


@dataclass
class CompressionResult:
    """One compression applied to every layer at once."""

    method: str
    family: str  # "rank", "quant", "groups"
    param: int
    bytes_per_token: float  # K + V, per token per layer
    fixed_bytes: int  # per layer, whatever the context length (the rank method's bases)
    ratio: float  # full bytes / bytes_per_token
    loss: float  # nats per token
    delta_loss: float  # loss - the exact model's loss
    delta_ci: tuple[float, float]  # paired bootstrap 95% interval of delta_loss
    lossless: bool  # |delta_loss| <= 2 SE of the evaluation
    kl: float  # mean over layers of AttentionRow.kl
    argmax_flips: float  # mean over layers
    key_error: float  # mean over layers
    output_error: float  # mean over layers


@dataclass
class BudgetVerdict:
    """Which family does least harm within one memory budget."""

    budget_bytes: float  # per token per layer
    ratio: float  # full / budget
    set_by: list[str]  # the compressions that store exactly this much
    best: dict[str, str | None]  # family -> its best compression within the budget (None: none fits)
    winner: str
    runner_up: str | None
    distinguishable: bool  # the paired 95% interval of (runner-up − winner) excludes 0
    equal_rank: int | None  # the rank storing the same bytes, when the ranks asked for do not include it
    text: str


@dataclass
class Question:
    question: str
    answer: list[str]  # sentences


@dataclass
class KvClaimReport(Record):
    """What `nanolm claims kv` measured: its --json output, saved in the run (to_dict), read back by the run's
    page (from_dict)."""

    model: str
    run_dir: str | None
    data: str
    sequences: int
    tokens_per_sequence: int
    attention_sequences: int  # the errors after softmax are measured on the first this many sequences
    n_layer: int
    n_head: int
    d_head: int
    dtype: str
    dtype_bytes: int
    key_group_tokens: int
    full_bytes_per_token: int  # K + V per token per layer, uncompressed
    ranks: list[int]
    loss: float  # the exact model's loss, nats per token
    loss_se: float  # its bootstrap standard error over sequences
    lossless_threshold: float  # 2 SE
    spectra: list[SpectrumRow]
    attention: list[AttentionRow]
    compressions: list[CompressionResult]
    budgets: list[BudgetVerdict]
    questions: list[Question]
    verdict: list[str]
    accounting: list[str]
    note: str | None = None
    seconds: float = 0.0
    seed: int = 0
    key_only: list[CompressionResult] = field(default_factory=list)  # rank r on K alone, V exact: question (1)
    notes: list[str] = field(default_factory=list)  # warnings about the input (the CLI shows them on stderr)

    def result(self, method: str) -> CompressionResult:
        return next(c for c in [*self.compressions, *self.key_only] if c.method == method)


# ---- data ---------------------------------------------------------------------------------------


def held_out_tokens(
    run_dir: Path | None, tokenizer: TokenizerLike, data_file: str | Path | None
) -> tuple[torch.Tensor, str, list[str]]:
    """(token ids [N], where they came from, notes): the run's validation split, or a UTF-8 text file tokenized
    with the run's tokenizer (a note names words it reads as unknown)."""
    if data_file is None:
        if run_dir is None:
            raise UserError("this model has no validation split nanolm knows of; give a text file with --data FILE")
        from ..config import config_from_dict
        from ..data import load_data
        from ..runs import read_manifest

        data = load_data(config_from_dict(read_manifest(run_dir).config))
        return data.val, f"validation split ({data.version})", []
    path = Path(data_file)
    if not path.is_file():
        raise UserError(f"--data {path}: no such file; give a UTF-8 text file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"--data {path}: not UTF-8 text (bad byte at offset {e.start}); convert it, e.g. iconv -f latin1 -t utf-8"
        ) from None
    ids = tokenizer.encode(text)
    if not ids:
        raise UserError(f"--data {path}: the file has no tokens; give a text file with some content")
    unknown = tokenizer.unknown_words(text)
    notes = (
        [
            f"--data {path}: {len(unknown)} distinct words are not in the run's vocabulary and read as one unknown "
            f"token (e.g. {', '.join(repr(w) for w in unknown[:3])})"
        ]
        if unknown
        else []
    )
    return torch.tensor(ids, dtype=torch.long), str(path), notes


def windows_of(tokens: torch.Tensor, n: int, length: int) -> torch.Tensor:
    """n windows [n, length + 1] spread evenly over tokens without overlapping (each gives `length`
    next-token predictions)."""
    stride = tokens.numel() // n if n else 0
    if n < 1 or stride < length + 1:
        most = tokens.numel() // (length + 1)
        raise UserError(
            f"the held-out text has {tokens.numel():,} tokens: not enough for {n} sequences of "
            f"{length} + 1; give --sequences {max(most, 1)} or fewer, a shorter --length, or more text"
        )
    return torch.stack([tokens[i * stride : i * stride + length + 1] for i in range(n)])


# ---- measuring ---------------------------------------------------------------------------------


def check_run(
    ref: str | Path,
    runs_dir: str | Path = "runs",
    *,
    data_file: str | Path | None = None,
    ranks: Sequence[int] | None = None,
    bits: Sequence[int] = (8, 4),
    groups: Sequence[int] | None = None,
    sequences: int = 64,
    length: int | None = None,
    seed: int = 0,
    note: str | None = None,
    progress: Progress | None = None,
) -> KvClaimReport:
    """check_kv_claim on a nanolm run (a folder, or a name under runs_dir): `sequences` windows of `length`
    tokens (default: 256, or the model's context if shorter) of its validation split or of data_file.
    ranks default to 4, 8, 16, 32 (those that fit in a head), groups to every size that divides the heads."""
    from ..interp.view import load_view
    from .kv_compress import default_groups, default_ranks

    view = load_view(ref, runs_dir)
    if view.arch != "nanolm":
        raise UserError(
            f"{ref}: a Hugging Face model; nanolm claims kv reads the keys and values of nanolm runs "
            "(their attention is recomputed through nanolm's hooks)"
        )
    model: GPT = view.model
    cfg = model.cfg
    ranks = default_ranks(cfg.d_head) if ranks is None else list(ranks)
    groups = default_groups(cfg.n_head) if groups is None else list(groups)
    check_compressions(cfg.n_head, cfg.d_head, ranks, bits, groups)  # before any data is read
    length = min(256, cfg.block_size) if length is None else length
    if not 1 <= length <= cfg.block_size:
        raise UserError(f"--length {length}: give 1 to the model's context of {cfg.block_size} tokens")
    if sequences < 2:
        raise UserError(f"--sequences {sequences}: give at least 2 (the noise of the evaluation is measured across them)")
    tokens, data, notes = held_out_tokens(view.run_dir, view.tokenizer, data_file)
    windows = windows_of(tokens, sequences, length)
    report = check_kv_claim(
        model,
        windows,
        ranks=ranks,
        bits=bits,
        groups=groups,
        seed=seed,
        note=note,
        data=data,
        name=view.name,
        run_dir=view.run_dir,
        progress=progress,
    )
    report.notes = notes + report.notes
    return report


def default_report_path(run_dir: str | Path, data_file: str | Path | None = None) -> Path:
    """<run>/claims/kv.json (kv-<file stem>.json for --data FILE), where a later report finds it."""
    from ..runs import CLAIMS

    name = "kv.json" if data_file is None else f"kv-{Path(data_file).stem}.json"
    return CLAIMS.path(run_dir, name, create=True)


@torch.no_grad()
def check_kv_claim(
    model: GPT,
    windows: torch.Tensor,
    *,
    ranks: Sequence[int],
    bits: Sequence[int],
    groups: Sequence[int],
    seed: int = 0,
    note: str | None = None,
    data: str = "",
    name: str = "",
    run_dir: str | Path | None = None,
    batch: int | None = None,
    attention_sequences: int = ATTENTION_SEQUENCES,
    progress: Progress | None = None,
) -> KvClaimReport:
    """The claim checked on windows [N, T+1] of held-out token ids: spectra, errors after softmax, the loss
    change of each compression at equal memory, and the verdict. Raises UserError for a rank larger than
    the head size, bits outside SUPPORTED_BITS, a group size that does not divide the heads."""
    start = time.perf_counter()
    cfg = model.cfg
    comps = check_compressions(cfg.n_head, cfg.d_head, ranks, bits, groups)
    if windows.size(1) - 1 > cfg.block_size:
        raise UserError(f"--length {windows.size(1) - 1} is longer than the model's context of {cfg.block_size}")
    dtype = next(model.parameters()).dtype
    shape = CacheShape(cfg.n_head, cfg.d_head, torch.finfo(dtype).bits // 8)
    batch = batch or _batch_size(windows.size(1) - 1, cfg.vocab_size)
    rank_list = sorted({c.param for c in comps if c.family == "rank"})
    total_steps = 1 + cfg.n_layer + len(comps) + len(rank_list)
    step = _stepper(progress, total_steps)

    exact, qkv = _exact_pass(model, windows, batch)
    _check_splice(model, windows[:batch], exact[:batch])
    step()
    key_sigma2, key_basis, value_sigma2, value_basis = _spectra(model, qkv)
    spectra = [_spectrum_row(layer, key_sigma2[layer], value_sigma2[layer], rank_list) for layer in range(cfg.n_layer)]
    key_only = [Compression("rank_k", r) for r in rank_list]  # question (1): K truncated, V exact
    fns = {c: compressor(c, *_rank_projectors(c, key_basis, value_basis, dtype)) for c in [*comps, *key_only]}
    attention = _attention_rows(model, qkv, fns, step, attention_sequences)
    del qkv
    losses = {}
    for c in fns:
        losses[c] = sequence_losses(model, windows, batch, fns[c])
        step()

    idx = np.random.default_rng(seed).integers(0, len(exact), size=(N_BOOT, len(exact)))
    exact_np = exact.numpy()
    se = float(exact_np[idx].mean(1).std(ddof=1))
    results = [
        _result(c, shape, exact_np, losses[c].numpy(), idx, se, [a for a in attention if a.method == c.label]) for c in comps
    ]
    key_results = [
        _result(c, shape, exact_np, losses[c].numpy(), idx, se, [a for a in attention if a.method == c.label]) for c in key_only
    ]
    budgets = _budgets(results, shape, rank_list, {c.label: losses[c].numpy() for c in comps}, idx)
    report = KvClaimReport(
        model=name,
        run_dir=None if run_dir is None else str(run_dir),
        data=data,
        sequences=windows.size(0),
        tokens_per_sequence=windows.size(1) - 1,
        attention_sequences=min(attention_sequences, windows.size(0)),
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        d_head=cfg.d_head,
        dtype=str(dtype).removeprefix("torch."),
        dtype_bytes=shape.dtype_bytes,
        key_group_tokens=shape.key_group,
        full_bytes_per_token=shape.full_bytes(),
        ranks=rank_list,
        loss=float(exact.mean()),
        loss_se=se,
        lossless_threshold=2 * se,
        spectra=spectra,
        attention=attention,
        compressions=results,
        budgets=budgets,
        questions=[],
        verdict=[],
        accounting=accounting(shape),
        note=note,
        seed=seed,
        key_only=key_results,
    )
    report.verdict = verdict_lines(report)
    report.questions = questions(report)
    report.seconds = time.perf_counter() - start
    return report


def _batch_size(T: int, vocab: int) -> int:
    """Sequences per forward pass: logits of at most ~64 MiB in float32, and at most 16 sequences."""
    return max(1, min(16, (16 << 20) // max(T * vocab, 1)))


def _stepper(progress: Progress | None, total: int) -> Callable[[], None]:
    done = [0]

    def step() -> None:
        done[0] += 1
        if progress is not None:
            progress(done[0], total)

    if progress is not None:
        progress(0, total)
    return step


def _exact_pass(model: GPT, windows: torch.Tensor, batch: int) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """(per-sequence loss [N] float64, {layer: qkv output [N, T, 3D]}) of the model as it is."""
    losses, kept_all = [], {layer: [] for layer in range(model.cfg.n_layer)}
    with recorded_qkv(model) as kept:
        for i in range(0, windows.size(0), batch):
            losses.append(sequence_losses(model, windows[i : i + batch], batch))
            for layer, out in kept.items():
                kept_all[layer].append(out)
    return torch.cat(losses), {layer: torch.cat(outs) for layer, outs in kept_all.items()}


def _check_splice(model: GPT, windows: torch.Tensor, exact: torch.Tensor) -> None:
    """The exact K and V spliced back through the hooks must give the model's loss bit for bit."""
    spliced = sequence_losses(model, windows, windows.size(0), compressor(Compression("exact")))
    if not torch.equal(spliced, exact):
        raise RuntimeError(
            "the spliced attention no longer reproduces the model's (loss "
            f"{float(spliced.mean())!r} vs {float(exact.mean())!r}): nanolm.model's attention changed "
            "and nanolm.research.kv_attention must follow it"
        )


def _spectra(model: GPT, qkv: dict[int, torch.Tensor]) -> tuple[dict, dict, dict, dict]:
    """σ² [H, Dh] and right singular vectors [H, Dh, Dh] of each layer's K and V over all recorded tokens
    (the matrices [N·T, Dh] of each head), batched over heads."""
    ks, kb, vs, vb = {}, {}, {}, {}
    for layer, out in qkv.items():
        _, k, v = split_heads(model, out)  # [N, H, T, Dh]
        ks[layer], kb[layer] = spectrum(gram(k.transpose(0, 1).flatten(1, 2)))  # [H, N·T, Dh] -> [H, Dh, Dh]
        vs[layer], vb[layer] = spectrum(gram(v.transpose(0, 1).flatten(1, 2)))
    return ks, kb, vs, vb


def _spectrum_row(layer: int, k_sigma2: torch.Tensor, v_sigma2: torch.Tensor, ranks: list[int]) -> SpectrumRow:
    ke = energy_kept(k_sigma2, ranks) if ranks else torch.zeros(k_sigma2.size(0), 0, dtype=torch.float64)
    ve = energy_kept(v_sigma2, ranks) if ranks else torch.zeros_like(ke)

    def needed(s2: torch.Tensor) -> dict[str, int]:
        return {f"{level:.0%}": int(rank_needed(s2, level).max()) for level in ENERGY_LEVELS}

    return SpectrumRow(
        layer,
        ke.mean(0).tolist(),
        ke.amin(0).tolist() if ranks else [],
        ve.mean(0).tolist(),
        ve.amin(0).tolist() if ranks else [],
        needed(k_sigma2),
        needed(v_sigma2),
        ke.tolist(),
        ve.tolist(),
    )


def _rank_projectors(c: Compression, key_basis: dict, value_basis: dict, dtype: torch.dtype) -> tuple:
    if c.family not in ("rank", "rank_k"):
        return ()
    layers = sorted(key_basis)
    return (
        torch.stack([projectors(key_basis[layer], c.param, dtype) for layer in layers]),
        torch.stack([projectors(value_basis[layer], c.param, dtype) for layer in layers]),
    )


def _attention_rows(
    model: GPT, qkv: dict[int, torch.Tensor], fns: dict, step: Callable[[], None], sequences: int, chunk: int = 8
) -> list[AttentionRow]:
    """Errors after softmax, per layer and compression, on the first `sequences` sequences; each layer's
    input is the exact model's (its qkv output as recorded). A chunk of sequences at a time, so no
    N x H x T x T tensor sits in memory."""
    rows: list[AttentionRow] = []
    for layer, out in qkv.items():
        attn = model.blocks[layer].attn
        errs = {c: AttentionErrors(model.cfg.n_head) for c in fns}
        for i in range(0, min(sequences, out.size(0)), chunk):
            q, k, v = split_heads(model, out[i : min(i + chunk, sequences)])
            exact = exact_attention(attn, q, k, v)
            for c, fn in fns.items():
                k_hat, v_hat = fn(layer, k, v)
                errs[c].add(exact, q, k, k_hat, attention_output(attn, q, k_hat, v_hat))
        for c, e in errs.items():
            heads = e.kl_heads
            rows.append(
                AttentionRow(layer, c.label, float(np.mean(heads)), max(heads), e.flip_rate, e.key_error, e.rel_error, heads)
            )
        step()
    return rows


def _result(
    c: Compression, shape: CacheShape, exact: np.ndarray, approx: np.ndarray, idx: np.ndarray, se: float, rows: list[AttentionRow]
) -> CompressionResult:
    d = approx - exact
    boot = d[idx].mean(1)
    lo, hi = np.quantile(boot, [0.025, 0.975])
    delta = float(d.mean())
    return CompressionResult(
        method=c.label,
        family=c.family,
        param=c.param,
        bytes_per_token=shape.bytes_per_token(c),
        fixed_bytes=shape.fixed_bytes(c),
        ratio=shape.ratio(c),
        loss=float(approx.mean()),
        delta_loss=delta,
        delta_ci=(float(lo), float(hi)),
        lossless=abs(delta) <= 2 * se,
        kl=float(np.mean([r.kl for r in rows])),
        argmax_flips=float(np.mean([r.argmax_flips for r in rows])),
        key_error=float(np.mean([r.key_error for r in rows])),
        output_error=float(np.mean([r.output_error for r in rows])),
    )


# ---- verdicts -----------------------------------------------------------------------------------


def _budgets(
    results: list[CompressionResult], shape: CacheShape, ranks: list[int], losses: dict[str, np.ndarray], idx: np.ndarray
) -> list[BudgetVerdict]:
    """At each budget any compression sets (most memory first): each family's best compression that fits,
    and which family wins."""
    out = []
    for budget in sorted({r.bytes_per_token for r in results if r.bytes_per_token < shape.full_bytes()}, reverse=True):
        fits = [r for r in results if r.bytes_per_token <= budget * (1 + 1e-12)]
        best: dict[str, CompressionResult | None] = {}
        for family in FAMILIES:
            members = [r for r in fits if r.family == family]
            best[family] = min(members, key=lambda r: r.delta_loss) if members else None
        if not any(r is not None and r.family != "rank" for r in best.values()) and len(ranks) > 1:
            continue  # a budget only ranks reach: the rank table already shows it
        ranked = sorted((r for r in best.values() if r is not None), key=lambda r: r.delta_loss)
        winner, runner = ranked[0], (ranked[1] if len(ranked) > 1 else None)
        distinguishable = False
        if runner is not None:
            diff = (losses[runner.method] - losses[winner.method])[idx].mean(1)
            distinguishable = bool(np.quantile(diff, 0.025) > 0)
        eq = shape.matching_rank(budget)
        equal_rank = eq if eq >= 1 and eq not in ranks else None
        set_by = [r.method for r in results if r.bytes_per_token == budget]
        verdict = BudgetVerdict(
            budget,
            shape.full_bytes() / budget,
            set_by,
            {f: (None if r is None else r.method) for f, r in best.items()},
            winner.method,
            None if runner is None else runner.method,
            distinguishable,
            equal_rank,
            "",
        )
        verdict.text = _budget_text(verdict, winner, runner)
        out.append(verdict)
    return out


def _budget_text(v: BudgetVerdict, winner: CompressionResult, runner: CompressionResult | None) -> str:
    head = f"at ≤ {v.budget_bytes:g} B per token per layer ({v.ratio:.2g}× smaller; set by {', '.join(v.set_by)}): "
    text = head + f"{FAMILIES[winner.family]} wins with {winner.method} (Δloss {winner.delta_loss:+.4f} nats)"
    if runner is None:
        text += "; no other family fits"
    else:
        text += f", ahead of {runner.method} ({runner.delta_loss:+.4f})"
        text += "" if v.distinguishable else ", though the two are not distinguishable (paired 95% interval covers 0)"
    if v.equal_rank is not None:
        text += f"; rank {v.equal_rank} would store the same bytes: add it with --ranks to compare at exactly equal memory"
    return text


def _claim_rank(report: KvClaimReport) -> int | None:
    """The rank that makes the reference's 8x (head size / 8) if asked for, else the middle rank asked for."""
    if not report.ranks:
        return None
    eight = report.d_head // 8
    return eight if eight in report.ranks else report.ranks[len(report.ranks) // 2]


def verdict_lines(report: KvClaimReport) -> list[str]:
    """The verdict in the reference's words: where "lossless" holds, what the 8x rank does, and which family
    wins the memory budgets (each budget's own sentence is in BudgetVerdict.text)."""
    lines = []
    lossless = [c for c in report.compressions if c.lossless and c.ratio > 1]  # rank = head size compresses nothing
    threshold = f"|Δloss| ≤ 2 SE = {report.lossless_threshold:.4f} nats, the noise of the evaluation"
    if lossless:
        listed = ", ".join(f"{c.method} ({c.ratio:.2g}× smaller)" for c in lossless)
        lines.append(f'"lossless" ({threshold}) holds for: {listed}')
    else:
        lines.append(f'"lossless" ({threshold}) holds for none of the compressions tried')
    detectable = [c.method for c in lossless if c.delta_ci[0] > 0]
    if detectable:
        lines.append(
            f"within that noise, yet measurably worse on these same sequences (paired 95% interval above 0): "
            f"{', '.join(detectable)}"
        )
    r = _claim_rank(report)
    if r is not None:
        c = report.result(f"rank {r}")
        energy = float(np.mean([s.k_energy[report.ranks.index(r)] for s in report.spectra]))
        follows = "holds here" if c.lossless else "does not follow from any theorem"
        lines.append(
            f"rank {r} of {report.d_head} ({c.ratio:.2g}× smaller cache) keeps {energy:.0%} of K's spectral "
            f'energy and changes the loss by {c.delta_loss:+.4f} nats: "lossless" {follows}'
        )
    if report.budgets:
        wins: dict[str, int] = {}
        for b in report.budgets:
            family = next(c.family for c in report.compressions if c.method == b.winner)
            wins[FAMILIES[family]] = wins.get(FAMILIES[family], 0) + 1
        lines.append(
            "at equal memory: "
            + "; ".join(f"{f} wins {n} of {len(report.budgets)} budgets" for f, n in sorted(wins.items(), key=lambda kv: -kv[1]))
        )
    return lines


def questions(report: KvClaimReport) -> list[Question]:
    """The reference's three questions; (1) and (2) answered with the measurements, (3) with the note."""
    q1 = [
        "The theorem says that truncated SVD gives the best approximation of the key matrix at a given rank, "
        "not that this approximation is good."
    ]
    for r in report.ranks:
        c = report.result(f"rank {r}")
        i = report.ranks.index(r)
        ke = float(np.mean([s.k_energy[i] for s in report.spectra]))
        ke_min = min(s.k_energy_min[i] for s in report.spectra)
        ve = float(np.mean([s.v_energy[i] for s in report.spectra]))
        k = report.result(f"rank {r}, K only")
        q1.append(
            f"rank {r} of {report.d_head}: K keeps {ke:.1%} of its energy (the worst head {ke_min:.1%}); with K alone "
            f"at rank {r} (V exact), after softmax KL {k.kl:.3g} nats per query, {k.argmax_flips:.1%} of queries "
            f"change their most attended key, K off by {k.key_error:.1%}, the attention output by "
            f"{k.output_error:.1%}; Δloss {k.delta_loss:+.4f} nats [{k.delta_ci[0]:+.4f}, {k.delta_ci[1]:+.4f}]: "
            f"{'lossless' if k.lossless else 'not lossless'}. V too at rank {r} (V keeps {ve:.1%}; the "
            f"{c.ratio:.0f}x cache): Δloss {c.delta_loss:+.4f} nats, {'lossless' if c.lossless else 'not lossless'}"
        )
    needed = {lvl: max(s.k_rank_needed[lvl] for s in report.spectra) for lvl in report.spectra[0].k_rank_needed}
    q1.append("rank K needs in the worst head of any layer: " + ", ".join(f"{n} for {lvl}" for lvl, n in needed.items()))
    q2 = [
        f"Every compression here stores the same {report.sequences} x {report.tokens_per_sequence} held-out tokens; "
        "they differ only in how, compared at equal memory (bytes per token per layer)."
    ]
    q2 += [b.text for b in report.budgets]
    q3 = [PRIOR_WORK, f"note: {report.note}" if report.note else "note: (none; add one with --note TEXT)"]
    return [Question(QUESTIONS[0], q1), Question(QUESTIONS[1], q2), Question(QUESTIONS[2], q3)]


def accounting(shape: CacheShape) -> list[str]:
    """How the bytes are counted, in words, with this model's numbers."""
    H, Dh, s, G = shape.n_head, shape.d_head, shape.dtype_bytes, shape.key_group
    return [
        f"full: K and V, {H} heads x {Dh} numbers x {s} B each = {shape.full_bytes()} B per token per layer",
        f"rank r: r coefficients per head for K and for V = 2·{H}·r·{s} B per token; the two bases "
        f"({Dh} x r per head) are a fixed 2·{H}·{Dh}·r·{s} B per layer, shared by every context (weights, "
        "not cache), so not counted per token",
        f"b-bit: codes 2·{H}·{Dh}·b/8 B, plus a scale and a zero point ({s} B each) per key channel per "
        f"{G} tokens (2·{H}·{Dh}·{s}/{G} B) and per value token and head (2·{H}·{s} B)",
        f"groups of g: {H}/g shared heads of K and V = 2·({H}/g)·{Dh}·{s} B",
    ]


def save_report(report: KvClaimReport, path: str | Path) -> Path:
    """Write the report as JSON (atomically; NaN as null)."""
    atomic_write_json(path, to_jsonable(report))
    return Path(path)
