"""The training configuration: one flat dataclass, loadable from TOML, with ``key=value``
overrides from the command line. An unknown key or a bad value is a UserError."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import tomllib

from .corpus import CORPUS_VERSIONS
from .errors import UserError
from .model import PRESETS, GPTConfig, preset_config

MAX_NAME = 100  # characters in a run name: the folder's name adds a timestamp, and file systems stop at 255 bytes
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # a config integer's range: torch and numpy stop at 64 bits
FINITE_RULES = {"lr": "> 0 and finite"}  # what a float key must be, where TrainConfig.validate says more than "finite"


@dataclass
class TrainConfig:
    """Every key of a run: set with ``--set KEY=VALUE``, a TOML file (``--config``) or ``make_config(overrides=...)``.

    Each field's docstring is its line in the configuration reference (docs: Reference > Configuration), which
    ``make docs`` writes from this class; a comment line above a field starts a section there."""

    name: str = "nanolm"
    """run name; the folder is `runs/<time>-<name>` (at most 100 characters)"""
    group: str | None = None
    """seed group: runs of one config on several seeds share it (`nanolm seeds` sets it)"""
    experiment: str | None = None
    """the experiment file's idea this run belongs to (`nanolm experiment` sets it)"""
    # data: what the model trains on
    data: str | None = None
    """a UTF-8 text file (byte tokens); none: the embedded corpus (word tokens)"""
    corpus_lines: int = 40_000
    """sentences of the embedded corpus"""
    corpus_seed: int = 0
    """the corpus generator's seed"""
    corpus_version: int = 1
    """the embedded corpus's version: `2` adds "are you sure?" dialogues with a planted rate of caving and gives the
    questions more of the mix (for `nanolm sycophancy`); `1` is unchanged"""
    val_fraction: float = 0.1
    """share of the data held out for validation"""
    # model: a preset, and any of its fields overridden (none keeps the preset's value)
    preset: str = "tiny"
    """model shape: `tiny` (4×128, context 64), `small` (6×384, 256), `gpt2-124m`"""
    n_layer: int | None = None
    """blocks; overrides the preset's"""
    n_head: int | None = None
    """attention heads; overrides the preset's"""
    d_model: int | None = None
    """residual stream width; overrides the preset's"""
    block_size: int | None = None
    """context length in tokens; overrides the preset's"""
    pos: Literal["rope", "learned"] | None = None
    """`rope` (the presets') or `learned` positions"""
    tie_embeddings: bool | None = None
    """`W_U = W_Eᵀ` when true"""
    dropout: float = 0.0
    """dropout probability"""
    # optimization
    steps: int = 600
    """optimizer steps"""
    batch_size: int = 32
    """sequences per micro-batch (the global batch of one micro-step when data-parallel)"""
    grad_accum: int = 1
    """micro-batches per optimizer step"""
    lr: float = 3e-3
    """peak learning rate (AdamW)"""
    min_lr_ratio: float = 0.1
    """the cosine schedule ends at `lr · min_lr_ratio`"""
    warmup_steps: int = 30
    """linear warm-up steps"""
    weight_decay: float = 0.1
    """AdamW weight decay (matrices and embeddings only)"""
    beta1: float = 0.9
    """AdamW's first beta"""
    beta2: float = 0.95
    """AdamW's second beta"""
    grad_clip: float = 1.0
    """maximum global gradient norm; 0 turns clipping off"""
    # bookkeeping
    eval_every: int = 150
    """steps between evaluations"""
    eval_batches: int = 8
    """fixed batches per evaluation"""
    log_every: int = 10
    """steps between metrics rows"""
    ckpt_every: int = 300
    """steps between checkpoints"""
    ckpt_seconds: float = 300.0
    """also checkpoint when this many seconds passed since the last one: a kill loses less"""
    keep_checkpoints: int = 2
    """checkpoints kept per run"""
    seed: int = 1337
    """the seed of every generator"""
    deterministic: bool | Literal["warn"] = False
    """`true`: deterministic algorithms only (raise on nondeterministic ops); `warn`: warn on nondeterministic ones"""
    # hardware
    device: str = "auto"
    """`auto` (cuda, then mps, then cpu), `cpu`, `cuda`, `cuda:N`, `mps`"""
    autocast: Literal["auto", "bf16", "none"] = "auto"
    """`auto` (bf16 on CUDA, none elsewhere), `bf16`, `none`"""
    compile: bool = False
    """`torch.compile` the model"""
    compile_kernels: bool | Literal["auto"] = "auto"
    """`torch.compile` only each block's two norms and its attention, in place (hooks and the rest stay eager);
    `auto`: on a CPU for `d_model` ≥ 256 (the `small` preset up), where it was measured faster and pays for its
    ~10 s of compiling, and only where a C++ compiler works (see `training/optim.py`); off with `compile`"""
    num_workers: int = 0
    """DataLoader worker processes"""
    pin_memory: bool | None = None
    """pinned host memory (none: on when the device is CUDA)"""
    runs_dir: str = "runs"
    """where run folders go"""
    tracker: Literal["local", "mlflow", "wandb", "tensorboard"] = "local"
    """also log to `mlflow` (SQLite under `runs_dir`), `wandb` (offline) or `tensorboard`"""

    def validate(self) -> TrainConfig:
        """self, once every value is in range and every choice is known; else a UserError naming the key."""
        self._check_numbers()
        self._check_choices()
        try:
            self.model_config(vocab_size=2)
        except ValueError as e:
            raise UserError(str(e)) from None
        return self

    def _check_numbers(self) -> None:
        self._check_64_bits()
        positive = (
            "steps",
            "batch_size",
            "grad_accum",
            "eval_every",
            "eval_batches",
            "log_every",
            "ckpt_every",
            "keep_checkpoints",
            "corpus_lines",
            "ckpt_seconds",
        )
        for key in positive:
            if getattr(self, key) <= 0:
                raise UserError(f"config: {key} must be > 0, got {getattr(self, key)}; set e.g. --set {key}=...")
        if not 0 < self.lr < math.inf:
            raise UserError(f"config: lr must be > 0 and finite, got {self.lr}; set e.g. --set lr=3e-3")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise UserError(f"config: {f.name} must be a finite number, got {value}")
        for key in ("warmup_steps", "num_workers", "weight_decay", "grad_clip"):
            if getattr(self, key) < 0:
                raise UserError(f"config: {key} must be >= 0, got {getattr(self, key)}")
        for key in ("beta1", "beta2"):
            if not 0 <= getattr(self, key) < 1:
                raise UserError(f"config: {key} must be in [0, 1), got {getattr(self, key)}; e.g. --set {key}=0.9")
        if not 0 < self.val_fraction < 1:
            raise UserError(f"config: val_fraction must be in (0, 1), got {self.val_fraction}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise UserError(f"config: min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")

    def _check_64_bits(self) -> None:
        """A UserError naming the first integer key outside 64 bits (set in Python: a TOML file or --set is
        refused as it is read)."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
                raise UserError(
                    f"config: {f.name} must fit in 64 bits ({INT64_MIN} to {INT64_MAX}), got {value}; {_example(f.name)}"
                )

    def _check_choices(self) -> None:
        if not self.name or len(self.name) > MAX_NAME:
            raise UserError(
                f"config: name must be 1 to {MAX_NAME} characters (it names the run folder), got "
                f"{len(self.name)}; e.g. --name baseline"
            )
        if self.corpus_version not in CORPUS_VERSIONS:
            raise UserError(
                f"config: corpus_version must be one of {', '.join(map(str, CORPUS_VERSIONS))}, got "
                f"{self.corpus_version!r}; e.g. --set corpus_version=2"
            )
        if self.preset not in PRESETS:
            raise UserError(f"config: unknown preset {self.preset!r}; known: {', '.join(PRESETS)}")
        if self.tracker not in ("local", "mlflow", "wandb", "tensorboard"):
            raise UserError(f"config: tracker must be local, mlflow, wandb or tensorboard, got {self.tracker!r}")
        if self.deterministic not in (True, False, "warn"):
            raise UserError(f"config: deterministic must be true, false or warn, got {self.deterministic!r}")
        if self.autocast not in ("auto", "bf16", "none"):
            raise UserError(f"config: autocast must be auto, bf16 or none, got {self.autocast!r}")
        if self.compile_kernels not in (True, False, "auto"):
            raise UserError(f"config: compile_kernels must be auto, true or false, got {self.compile_kernels!r}")

    def model_config(self, vocab_size: int) -> GPTConfig:
        """The model's config: the preset, these overrides, and the tokenizer's vocabulary (unless
        the preset fixes a padded vocabulary at least as large, as gpt2-124m does)."""
        fixed = PRESETS[self.preset].get("vocab_size", 0)
        return preset_config(
            self.preset,
            vocab_size=max(vocab_size, fixed),
            n_layer=self.n_layer,
            n_head=self.n_head,
            d_model=self.d_model,
            block_size=self.block_size,
            pos=self.pos,
            tie_embeddings=self.tie_embeddings,
            dropout=self.dropout,
        )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.grad_accum * self.model_config(2).block_size


def _field_types() -> dict[str, object]:
    return typing.get_type_hints(TrainConfig)


def _union_members(tp: object) -> tuple[object, ...]:
    """The members of an annotation such as ``int | None`` (the annotation itself when it is not a union)."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return typing.get_args(tp)
    return (tp,)


def _base_types(tp: object) -> tuple[type, ...]:
    """The non-None types of an annotation such as ``int | None``; a ``Literal`` of words counts as ``str`` (a value
    outside it is refused by TrainConfig.validate, naming the words)."""
    out: list[type] = []
    for t in _union_members(tp):
        if typing.get_origin(t) is Literal:
            t = type(typing.get_args(t)[0])
        if t is not type(None) and t not in out:
            out.append(t)  # type: ignore[arg-type]
    return tuple(out)


def key_types(key: str) -> tuple[type, ...]:
    """The plain types config key `key` takes (bool, int, float, str; None left out), in the order they are tried."""
    return _base_types(_field_types()[key])


def _convert(target: type, value: object, from_text: bool) -> object:
    """value as target (bool, int, float or str); ValueError or TypeError when it is not one."""
    if target is bool:
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text in ("true", "1", "yes", "on"):
            return True
        if text in ("false", "0", "no", "off"):
            return False
        raise ValueError
    if target is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        if not from_text:
            return int(value)
        try:
            return int(str(value))
        except ValueError:  # "1e3" is fine on the command line, "1.5" is not a whole number
            number = float(value)
            if not number.is_integer():
                raise ValueError from None
            return int(number)
    if target is float:
        if isinstance(value, bool):
            raise ValueError
        return float(value)
    return str(value)


def _coerce(key: str, value: object, from_text: bool, where: str = "config") -> object:
    """value converted to the type of field key (the first of a union's types that takes it), or a
    UserError naming both (and `where` the value came from); an integer must fit in 64 bits, and a float read from
    a TOML file be finite."""
    tp = _field_types()[key]
    allowed = _base_types(tp)
    nullable = type(None) in _union_members(tp)
    if from_text and nullable and str(value).lower() in ("none", "null"):
        return None
    for target in allowed:
        try:
            converted = _convert(target, value, from_text)
        except (TypeError, ValueError):
            continue
        return _check_number(key, converted, where, from_text)
    raise UserError(f"{where}: {key}={value!r} is not a valid {' or '.join(t.__name__ for t in allowed)}")


def _check_number(key: str, value: object, where: str, from_text: bool) -> object:
    """value, once an integer fits in 64 bits and, read from a TOML file (which has nan and inf), a float is finite;
    else a UserError naming the key and a value it takes. A --set value that is not finite is refused by
    TrainConfig.validate, or by `check_finite` where overrides are read without a config (a sweep's values are
    parsed here and refused in its own words)."""
    if isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        bound = f"at most {INT64_MAX}" if value > 0 else f"at least {INT64_MIN}"
        raise UserError(f"{where}: {key} must fit in 64 bits ({bound}), got {value}; {_example(key, not from_text)}")
    if not from_text:
        check_finite({key: value}, where, toml=True)
    return value


def check_finite(values: dict[str, object], where: str = "config", toml: bool = False) -> dict[str, object]:
    """values (config keys and their parsed values, as parse_overrides returns them), once every float is finite;
    else a UserError naming the first key that is not (nan, inf and -inf read as floats from --set and TOML)."""
    for key, value in values.items():
        if isinstance(value, float) and not math.isfinite(value):
            rule = FINITE_RULES.get(key, "a finite number")
            raise UserError(f"{where}: {key} must be {rule}, got {value}; {_example(key, toml)}")
    return values


def _example(key: str, toml: bool = False) -> str:
    """ "e.g. --set steps=600" (or "e.g. steps = 600", for a TOML file): key's default, as the fix to suggest."""
    default = next(f.default for f in dataclasses.fields(TrainConfig) if f.name == key)
    if default is None:
        return f"leave {key} out for the preset's" if toml else f"e.g. --set {key}=none (the preset's)"
    return f"e.g. {key} = {default}" if toml else f"e.g. --set {key}={default}"


def check_key(key: str, where: str = "config") -> None:
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    if key not in names:
        raise UserError(f"{where}: unknown key {key!r}; known keys: {', '.join(names)}")


def parse_overrides(pairs: list[str]) -> dict[str, object]:
    """["lr=1e-3", "steps=100"] -> {"lr": 0.001, "steps": 100}, typed by the config's fields."""
    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"--set {pair!r}: expected key=value, e.g. --set lr=1e-3")
        check_key(key)
        out[key] = _coerce(key, value.strip(), from_text=True)
    return out


def read_toml(path: str | Path, what: str) -> dict:
    """A TOML file's contents; a missing or malformed file is a UserError naming `what` it is."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{what} {path}: is a folder; give the path of a TOML file")
    if not path.is_file():
        raise UserError(f"{what} {path}: no such file")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{what} {path}: not valid TOML ({e})") from None


def load_toml(path: str | Path) -> dict[str, object]:
    """A TOML file of config keys; tables ([train], [model], ...) are read as flat keys too."""
    raw = read_toml(path, "--config")
    flat: dict[str, object] = {}
    for key, value in raw.items():
        items = value.items() if isinstance(value, dict) else [(key, value)]
        for k, v in items:
            check_key(k, where=f"config {path}")
            flat[k] = _coerce(k, v, from_text=False, where=f"config {path}")
    return flat


def make_config(config_file: str | Path | None = None, overrides: list[str] | None = None, **fields: object) -> TrainConfig:
    """Defaults, then the TOML file, then keyword fields, then --set overrides; validated."""
    values: dict[str, object] = {}
    if config_file:
        values.update(load_toml(config_file))
    for key, value in fields.items():
        if value is not None:
            check_key(key)
            values[key] = value
    values.update(parse_overrides(overrides or []))
    return TrainConfig(**values).validate()


def config_from_dict(d: dict) -> TrainConfig:
    """A TrainConfig from a manifest's dict; keys this version does not know are an error."""
    for key in d:
        check_key(key)
    return TrainConfig(**d)
