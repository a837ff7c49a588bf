"""The problems: name, skill, points, files (instructions, starter, hints, reference solution) and
checks. Import-light: no torch here, so ``nanolm problems list`` stays fast.

Each problem's files live in the package, under ``files/<name>/``: ``instructions.md``,
``hints.md`` (hints separated by lines of ``---``), ``starter.py`` and ``reference.py``. The
find-and-fix problems have no starter file: theirs is the reference with every bug patch applied,
so the bugs, the starter and the checks cannot drift apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import UserError

FILES = "files"


@dataclass(frozen=True)
class BugPatch:
    """One planted bug: the text `find` of the reference becomes `replace` in the starter; `check`
    names the one check that fails while this bug is present; `what` says what it was (shown with
    the solution)."""

    find: str
    replace: str
    check: str
    what: str


@dataclass(frozen=True)
class Problem:
    name: str
    skill: str
    points: int
    file: str  # the file the learner edits, written into their folder by `start`
    entry: tuple[str, ...]  # names the learner's module must define
    checks: str  # the module under nanolm.problems.checks holding CHECKS (a list, or a dict by problem name)
    bugs: tuple[BugPatch, ...] = field(default=())
    pool: tuple[str, ...] = field(default=())  # a pooled problem: its variants, one drawn per learner (files/NAME/pool/)

    def _path(self, name: str) -> Path:
        return Path(str(resources.files(__package__).joinpath(FILES, self.name, name)))

    def pool_path(self, variant: str, suffix: str = ".py") -> Path:
        """A pooled problem's file for `variant`: the script as given (".py"), its reference fix ("_fixed.py")
        or its reference report ("_report.toml")."""
        if variant not in self.pool:
            raise UserError(f"{self.name} has no variant {variant!r}; its pool: {', '.join(self.pool)}")
        return self._path(f"pool/{variant}{suffix}")

    @property
    def reference_path(self) -> Path:
        return self.pool_path(self.pool[0], "_fixed.py") if self.pool else self._path("reference.py")

    def instructions(self) -> str:
        return self._path("instructions.md").read_text(encoding="utf-8")

    def hints(self) -> list[str]:
        text = self._path("hints.md").read_text(encoding="utf-8")
        return [re.sub(r"(?<!\n)\n(?!\n)", " ", h.strip()) for h in text.split("\n---\n") if h.strip()]

    def reference(self, variant: str | None = None) -> str:
        if self.pool and variant is not None:
            return self.pool_path(variant, "_fixed.py").read_text(encoding="utf-8")
        return self.reference_path.read_text(encoding="utf-8")

    def starter(self, variant: str | None = None) -> str:
        """The file the learner starts from: the shipped starter, the reference with every bug planted, or
        (a pooled problem) the variant's script as given."""
        if self.pool:
            return self.pool_path(variant or self.pool[0]).read_text(encoding="utf-8")
        if not self.bugs:
            return self._path("starter.py").read_text(encoding="utf-8")
        return plant(self.reference(), self.bugs)

    def check_names(self) -> list[str]:
        """The checks this problem runs, in order; no torch imported. A find-and-fix problem: first one per
        planted bug (in the bugs' order), then the rest of the whole block's checks, so that a "fix" that
        breaks something else fails too."""
        if self.bugs:
            own = [b.check for b in self.bugs]
            rest = [c for c in FIND_AND_FIX_CHECKS if c not in own and (c != "rotary_positions" or "rotary" in self.entry)]
            return own + rest
        return list(CHECK_NAMES[self.checks])


def plant(source: str, bugs: tuple[BugPatch, ...] | list[BugPatch]) -> str:
    """`source` with each bug's find text replaced; each must occur exactly once."""
    for bug in bugs:
        n = source.count(bug.find)
        if n != 1:
            raise ValueError(f"bug patch {bug.find!r} occurs {n} times in the source, not once")
        source = source.replace(bug.find, bug.replace)
    return source


# The names of each checks module's checks, in order, so the CLI can list them without importing torch;
# tests/test_problems.py keeps them equal to the modules' own lists.
CHECK_NAMES: dict[str, tuple[str, ...]] = {
    "logit_lens": ("shape", "last_layer", "matches_lens", "final_norm"),
    "linear_probe": (
        "split_sizes",
        "learns_signal",
        "held_out",
        "train_accuracy",
        "seeded",
        "stratified",
        "held_out_unseen",
        "chance_interval",
    ),
    "mfu": ("reference_numbers", "random_variants", "with_attention", "training_days", "model_params"),
    "gamblers_ruin": ("fair_game", "closed_form", "long_games", "simulation", "interval", "seeded"),
    "stars_and_bars": ("small_cases", "edge_cases", "exact_large", "unbounded"),
    "seed_noise": (
        "reference_example",
        "edge_cases",
        "pure_noise",
        "real_effect",
        "spread_rule",
        "either_spread",
        "welch_rule",
        "agrees_with_compare",
    ),
    "bottleneck": ("bottleneck", "evidence", "faster", "still_trains", "measured"),
    "dfa_to_rnn": ("interface", "parity", "random_dfas", "start_state", "edge_cases", "long_strings"),
}

# Every find-and-fix problem runs these on the whole block (rotary_positions where the block has rotary).
FIND_AND_FIX_CHECKS = (
    "causal",
    "weights_sum",
    "scale",
    "split",
    "merge",
    "relative",
    "rotary_positions",
    "residual",
    "norm",
    "eval_deterministic",
    "train_dropout",
    "loss",
    "matches_reference",
)

_B1 = (
    BugPatch(
        '        scores = scores.masked_fill(~mask, float("-inf"))\n',
        "",
        "causal",
        "the causal mask was never applied (attend): every position saw the whole sequence",
    ),
    BugPatch(
        "scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))",
        "scores = q @ k.transpose(-2, -1)",
        "scale",
        "the scores were not divided by sqrt(d_head) (attend): attention too sharp",
    ),
    BugPatch(
        "return x.view(B, T, self.n_head, self.d_head).transpose(1, 2)",
        "return x.reshape(B, self.n_head, T, self.d_head)",
        "split",
        "split_heads reshaped [B, T, D] straight to [B, H, T, Dh]: heads mixed positions",
    ),
    BugPatch(
        "weights = F.dropout(weights, self.dropout, training=self.training)",
        "weights = F.dropout(weights, self.dropout)",
        "eval_deterministic",
        "F.dropout's training flag defaults to True (attend): dropout in eval",
    ),
    BugPatch(
        "x = x + self.attention(self.ln1(x), start)",
        "x = self.attention(self.ln1(x), start)",
        "residual",
        "the attention's residual connection was dropped (forward)",
    ),
    BugPatch(
        "F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1))",
        "F.cross_entropy(logits.reshape(-1, V), tokens.reshape(-1))",
        "loss",
        "the targets were not shifted (lm_loss): it rewarded copying the current token",
    ),
)
_B2 = (
    BugPatch(
        "allowed = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()",
        "allowed = torch.ones(T, T, dtype=torch.bool, device=q.device).tril(diagonal=1)",
        "causal",
        "the causal mask was off by one (attend): each position saw the next one",
    ),
    BugPatch(
        "weights = torch.softmax(scores, dim=-1)",
        "weights = torch.softmax(scores, dim=-2)",
        "weights_sum",
        "softmax over the queries' axis instead of the keys' (attend)",
    ),
    BugPatch(
        "return y.transpose(1, 2).reshape(B, T, H * Dh)",
        "return y.reshape(B, T, H * Dh)",
        "merge",
        "merge_heads reshaped without moving the head axis back (merge_heads)",
    ),
    BugPatch(
        "q, k = rotary(q, start), rotary(k, start)",
        "q, v = rotary(q, start), rotary(v, start)",
        "relative",
        "rotary was applied to the values instead of the keys (attention)",
    ),
    BugPatch(
        "x = x + self.attention(self.ln1(x), start)",
        "x = x + self.ln1(self.attention(x, start))",
        "norm",
        "the norm was applied to the attention's output instead of its input (forward)",
    ),
    BugPatch(
        "x = x + self.mlp(self.ln2(x))",
        "x = self.mlp(self.ln2(x))",
        "residual",
        "the MLP's residual connection was dropped (forward)",
    ),
)
_B3 = (
    BugPatch(
        'scores = scores.masked_fill(future, float("-inf"))',
        'scores = scores.masked_fill(~future, float("-inf"))',
        "causal",
        "the causal mask was inverted (attend): positions saw only later ones, the last saw none (NaN)",
    ),
    BugPatch(
        "positions = torch.arange(start, start + T, dtype=torch.float32)",
        "positions = torch.arange(start + 1, start + T + 1, dtype=torch.float32)",
        "rotary_positions",
        "rotary's positions were off by one (rotary)",
    ),
    BugPatch(
        "q, k = rotary(q, start), rotary(k, start)",
        "q, k, v = rotary(q, start), rotary(k, start), rotary(v, start)",
        "relative",
        "rotary was applied to the values as well (attention)",
    ),
    BugPatch(
        "x = x + self.mlp(self.ln2(x))",
        "x = self.ln2(x + self.mlp(x))",
        "norm",
        "the MLP read the raw residual stream and the norm came after the sum, post-norm style (forward)",
    ),
    BugPatch(
        "h = F.dropout(h, self.dropout, training=self.training)",
        "h = F.dropout(h, self.dropout)",
        "eval_deterministic",
        "F.dropout's training flag defaults to True (mlp): dropout in eval",
    ),
    BugPatch(
        "F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1))",
        "F.cross_entropy(logits[:, 1:].reshape(-1, V), tokens[:, :-1].reshape(-1))",
        "loss",
        "the targets were shifted the wrong way (lm_loss): it rewarded predicting the previous token",
    ),
)

_DEBUG = "ML debugging: planted bugs in a transformer block"
PROBLEMS: dict[str, Problem] = {
    p.name: p
    for p in (
        Problem("logit_lens", "interpretability: the logit lens", 10, "logit_lens.py", ("logit_lens",), "logit_lens"),
        Problem(
            "linear_probe",
            "interpretability: probes, held-out accuracy",
            10,
            "linear_probe.py",
            ("linear_probe",),
            "linear_probe",
        ),
        Problem("find_and_fix_1", _DEBUG, 15, "block.py", ("Block", "lm_loss"), "find_and_fix", _B1),
        Problem("find_and_fix_2", _DEBUG, 15, "block.py", ("Block", "lm_loss", "rotary"), "find_and_fix", _B2),
        Problem("find_and_fix_3", _DEBUG, 15, "block.py", ("Block", "lm_loss", "rotary"), "find_and_fix", _B3),
        Problem(
            "mfu",
            "performance: model FLOPs utilization",
            5,
            "mfu.py",
            ("mfu", "mfu_with_attention", "training_days", "mfu_of_model"),
            "mfu",
        ),
        Problem(
            "gamblers_ruin",
            "math: recurrences, simulation with a confidence interval",
            10,
            "gamblers_ruin.py",
            ("ruin_probability", "simulate_ruin"),
            "gamblers_ruin",
        ),
        Problem(
            "stars_and_bars",
            "math: counting by inclusion–exclusion",
            10,
            "stars_and_bars.py",
            ("count_solutions",),
            "stars_and_bars",
        ),
        Problem("seed_noise", "research craft: seed noise, a result or not", 10, "seed_noise.py", ("decide",), "seed_noise"),
        Problem(
            "bottleneck",
            "performance: name a bottleneck from a profile, fix it, measure",
            15,
            "train_fixed.py",
            ("main",),
            "bottleneck",
            pool=("slow_data", "tiny_ops", "get_batch"),
        ),
        Problem("dfa_to_rnn", "expressivity: a DFA as a ReLU-RNN", 10, "dfa_to_rnn.py", ("dfa_to_rnn",), "dfa_to_rnn"),
    )
}


def get_problem(name: str) -> Problem:
    """The problem called `name`; a UserError listing the known ones otherwise."""
    try:
        return PROBLEMS[name]
    except KeyError:
        raise UserError(f"unknown problem {name!r}; known problems: {', '.join(PROBLEMS)}") from None
