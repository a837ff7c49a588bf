"""Resuming a run: the keys a resume may change (RESUMABLE_CHANGES), the run's saved config with the user's
changes merged in, and the checks that the checkpoint, the data, the model and the number of processes are
the run's own, each a UserError that says how to go on."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..checkpoint import Checkpoint, read_checkpoint
from ..config import TrainConfig, config_from_dict, load_toml, parse_overrides
from ..data import TokenData
from ..errors import UserError
from ..model import GPTConfig
from ..runs import MODEL_FIELDS, Manifest, RunStatus, process_gone, read_manifest
from ..tokenizers import Tokenizer

# Keys that may change when a run is resumed: they do not change what is computed.
RESUMABLE_CHANGES = {
    "steps",
    "tracker",
    "eval_every",
    "log_every",
    "ckpt_every",
    "ckpt_seconds",
    "keep_checkpoints",
    "num_workers",
    "pin_memory",
    "device",
    "compile",
    "compile_kernels",
    "runs_dir",
}


def merged_config(
    run_dir: Path, config_file: str | Path | None = None, overrides: tuple[str, ...] | list[str] = (), fields: dict | None = None
) -> TrainConfig:
    """The run's saved config with the user's changes on top: a TOML file, then keyword fields (None: unset),
    then ``--set`` overrides; validated. Which keys may change is checked when the run resumes (resume_config)."""
    values = read_manifest(run_dir).config_as_trained()
    if config_file:
        values.update(load_toml(config_file))
    values.update({k: v for k, v in (fields or {}).items() if v is not None})
    values.update(parse_overrides(list(overrides)))
    try:
        return TrainConfig(**values).validate()
    except (TypeError, ValueError) as e:  # the run's manifest was edited: unknown keys, wrong types
        raise UserError(f"--resume {run_dir}: its manifest's config is not valid ({e}); resume an intact run") from None


def resume_config(run_dir: Path, cfg: TrainConfig | None) -> tuple[TrainConfig, Checkpoint, Manifest]:
    """The run's config (with allowed changes from cfg), its latest checkpoint and its manifest."""
    try:
        manifest = read_manifest(run_dir)
        ckpt = read_checkpoint(run_dir)
        saved = config_from_dict(manifest.config_as_trained())
        _ = (
            int(ckpt.state["step"]),
            ckpt.state["data"]["sha256"],
            ckpt.state["data"]["version"],
            ckpt.state["rng"],
        )  # every field the resume reads, present and of the right kind
        if cfg is not None:  # a model field left to the preset (None) is the run's, as in the saved config
            cfg = replace(cfg, **{k: getattr(saved, k) for k in MODEL_FIELDS if getattr(cfg, k) is None})
            _check_resumable_changes(run_dir, saved, cfg)
        cfg = (cfg or saved).validate()
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(
            f"--resume {run_dir}: its manifest or checkpoint state was edited or is damaged "
            f"({type(e).__name__}: {e}); resume an intact run, or start a new one"
        ) from None
    if int(ckpt.state["step"]) < 0:
        raise UserError(f"--resume {run_dir}: the checkpoint says step {ckpt.state['step']}; resume an intact run")
    if manifest.status is RunStatus.RUNNING and process_gone(manifest.owner) is False:
        raise UserError(
            f"--resume {run_dir}: process {manifest.owner.get('pid')} is still training it; wait for it "
            "to end, or stop it (Ctrl-C or kill: it checkpoints), then resume"
        )
    return cfg, ckpt, manifest


def _check_resumable_changes(run_dir: Path, saved: TrainConfig, cfg: TrainConfig) -> None:
    changed = {
        k: (getattr(saved, k), getattr(cfg, k))
        for k in saved.to_dict()
        if getattr(saved, k) != getattr(cfg, k)
        and k not in RESUMABLE_CHANGES
        # Another path to a file is fine: its content is checked against the checkpoint's hash.
        and not (k == "data" and saved.data and cfg.data)
    }
    if changed:
        key, (old, new) = next(iter(changed.items()))
        raise UserError(
            f"config mismatch on resume: {key} is {old!r} in {run_dir.name} but {new!r} now; "
            "resume with the run's own config, or start a new run"
        )


def check_checkpoint_matches(ckpt: Checkpoint, data: TokenData, tokenizer: Tokenizer, model_cfg: GPTConfig) -> None:
    """The checkpoint was made from this data, vocabulary and model shape."""
    if ckpt.state["data"]["sha256"] != data.sha256 or ckpt.state["data"]["version"] != data.version:
        raise UserError(
            f"data mismatch on resume: the run trained on {ckpt.state['data']['version']} "
            f"(sha256 {ckpt.state['data']['sha256'][:12]}), the data now is {data.version} "
            f"(sha256 {data.sha256[:12]}); resume with the same data"
        )
    if ckpt.tokenizer.to_dict() != tokenizer.to_dict():
        raise UserError(
            f"vocabulary mismatch on resume: the checkpoint's tokenizer "
            f"({ckpt.tokenizer.kind}, {ckpt.tokenizer.vocab_size} tokens) differs from the data's "
            f"({tokenizer.kind}, {tokenizer.vocab_size} tokens)"
        )
    if ckpt.model_config != model_cfg:
        raise UserError(
            f"config mismatch on resume: the checkpoint's model is {ckpt.model_config}, the config asks for {model_cfg}"
        )


def check_manifest_model(run_dir: Path, manifest: Manifest, ckpt: Checkpoint) -> None:
    """The manifest describes the model the checkpoint holds (an edited manifest would mislead every reader)."""
    if manifest.model_config and manifest.model_config != ckpt.model_config.to_dict():
        diff = [
            f"{k}: {v!r} in the manifest, {ckpt.model_config.to_dict().get(k)!r} in the checkpoint"
            for k, v in manifest.model_config.items()
            if ckpt.model_config.to_dict().get(k) != v
        ]
        raise UserError(
            f"--resume {run_dir}: the manifest's model_config was edited ({'; '.join(diff[:2])}); "
            "restore manifest.json, or start a new run for another model"
        )


def check_world_size(run_dir: Path, ckpt: Checkpoint, world_size: int) -> None:
    """A run resumes on as many processes as trained it: its checkpoint holds one RNG state per rank."""
    trained = ckpt.state.get("world_size", 1)  # checkpoints from before data parallelism: one process
    per_rank = ckpt.state.get("rng_ranks")
    if (
        not isinstance(trained, int)
        or trained < 1
        or (trained > 1 and not (isinstance(per_rank, list) and len(per_rank) == trained))
    ):
        raise UserError(
            f"--resume {run_dir}: its checkpoint's world_size or per-rank RNG states were edited or are "
            "damaged; resume an intact run, or start a new one"
        )
    if trained != world_size:
        how = resume_command(run_dir, trained) + (" (one process)" if trained == 1 else "")
        raise UserError(
            f"--resume {run_dir}: the run was trained by {trained} process(es) and this is {world_size}; "
            f"its checkpoint holds one random state per rank, so it continues bit for bit only on "
            f"{trained}; resume with: {how}, or start a new run"
        )


def resume_command(run_dir: Path, world_size: int = 1, launcher: str = "torchrun") -> str:
    """The command that continues a run on as many processes as it had."""
    if world_size == 1:
        return f"nanolm train --resume {run_dir}"
    if launcher == "slurm":
        return f"srun --ntasks {world_size} nanolm train --resume {run_dir}"
    return f"nanolm train --nproc {world_size} --resume {run_dir}"
