"""Experiment trackers. The local run store (manifest.json, metrics.jsonl) is always written; a
tracker logs the same config, manifest (commit, data version) and metrics to one more place:

- ``mlflow``: a local SQLite store, ``<runs_dir>/mlflow.db`` (extra ``nanolm[mlflow]``);
- ``wandb``: offline mode, under ``<runs_dir>/wandb`` (extra ``nanolm[wandb]``): nothing needs the network;
- ``tensorboard``: event files in ``<run>/tensorboard`` (extra ``nanolm[tensorboard]``).

Each is imported only when chosen."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .errors import UserError
from .runs import Manifest

TRACKERS = ("local", "mlflow", "wandb", "tensorboard")
EXTRAS = {"mlflow": "mlflow", "wandb": "wandb", "tensorboard": "tensorboard"}


def _flat(d: dict, prefix: str = "") -> dict[str, object]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists and None become JSON text."""
    out: dict[str, object] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v if isinstance(v, (int, float, str, bool)) else json.dumps(v)
    return out


class Tracker:
    """The local store only: every method does nothing."""

    def start(self, run_dir: Path, manifest: Manifest) -> None: ...

    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def finish(self, status: str) -> None: ...


def _need(module: str, name: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise UserError(f"--tracker {name} needs its extra: pip install 'nanolm[{EXTRAS[name]}]'") from None


class MlflowTracker(Tracker):
    @staticmethod
    def prepare(runs_dir: str | Path, experiment: str | None) -> None:
        """Create the SQLite store under runs_dir and the experiment in it. Parallel runs call this
        once beforehand (nanolm seeds, experiment run): a store created by two processes at once fails
        its schema migration."""
        import logging

        mlflow = _need("mlflow", "mlflow")
        for noisy in ("alembic", "mlflow.store.db.utils"):  # schema-migration INFO lines on stderr
            logging.getLogger(noisy).setLevel(logging.WARNING)
        runs_dir = Path(runs_dir).resolve()
        runs_dir.mkdir(parents=True, exist_ok=True)
        mlflow.set_tracking_uri(f"sqlite:///{runs_dir / 'mlflow.db'}")
        name = experiment or "nanolm"
        if mlflow.get_experiment_by_name(name) is None:  # artifacts beside the store, not in ./mlruns
            mlflow.create_experiment(name, artifact_location=(runs_dir / "mlflow-artifacts").as_uri())
        mlflow.set_experiment(name)

    def start(self, run_dir: Path, manifest: Manifest) -> None:
        mlflow = self.mlflow = _need("mlflow", "mlflow")
        self.prepare(run_dir.parent, manifest.config.get("experiment"))
        existing = manifest.trackers.get("mlflow_run_id")
        run = mlflow.start_run(run_id=existing) if existing else mlflow.start_run(run_name=run_dir.name)
        manifest.trackers["mlflow_run_id"] = run.info.run_id
        if not existing:
            mlflow.log_params({k: str(v)[:500] for k, v in _flat(manifest.config).items()})
        git, data = manifest.git, manifest.data
        mlflow.set_tags(
            {
                "git_commit": str(git.get("commit")),
                "git_dirty": str(git.get("dirty")),
                "data_version": str(data.get("version")),
                "data_sha256": str(data.get("sha256")),
                "run_dir": str(run_dir),
            }
        )
        mlflow.log_dict(manifest.to_dict(), "manifest.json")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.mlflow.log_metrics(metrics, step=step)

    def finish(self, status: str) -> None:
        self.mlflow.end_run("FINISHED" if status in ("finished", "stopped") else "FAILED")


class WandbTracker(Tracker):
    def start(self, run_dir: Path, manifest: Manifest) -> None:
        os.environ.setdefault("WANDB_SILENT", "true")
        wandb = _need("wandb", "wandb")
        existing = manifest.trackers.get("wandb_run_id")
        self.run = wandb.init(
            project=manifest.config.get("experiment") or "nanolm",
            name=run_dir.name,
            dir=str(run_dir.parent),
            mode="offline",
            config=manifest.config,
            id=existing,
            resume="allow" if existing else None,
        )
        manifest.trackers["wandb_run_id"] = self.run.id
        self.run.summary.update({"git_commit": manifest.git.get("commit"), "data_version": manifest.data_version})

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def finish(self, status: str) -> None:
        # wandb's service process may still be writing the offline log when this returns; the log is
        # complete by the time the service exits (at interpreter exit at the latest), before `wandb sync`.
        self.run.finish(exit_code=0 if status in ("finished", "stopped") else 1)


class TensorboardTracker(Tracker):
    def start(self, run_dir: Path, manifest: Manifest) -> None:
        _need("tensorboard", "tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        self.writer.add_text("manifest", "```\n" + json.dumps(manifest.to_dict(), indent=2) + "\n```", 0)
        self.writer.add_text("git_commit", str(manifest.git.get("commit")), 0)
        self.writer.add_text("data_version", str(manifest.data_version), 0)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, step)

    def finish(self, status: str) -> None:
        self.writer.close()


MODULES = {"mlflow": "mlflow", "wandb": "wandb", "tensorboard": "tensorboard"}  # what each tracker's extra installs


def make_tracker(name: str) -> Tracker:
    """The tracker `name`, once its extra is known to be installed: a run refused for a missing extra is refused
    before its folder exists (the module is found, not imported: mlflow takes seconds to import)."""
    import importlib.util

    if name not in TRACKERS:
        raise UserError(f"unknown tracker {name!r}; choose one of {', '.join(TRACKERS)}")
    if name in MODULES and importlib.util.find_spec(MODULES[name]) is None:
        raise UserError(f"--tracker {name} needs its extra: pip install 'nanolm[{EXTRAS[name]}]'")
    return {"local": Tracker, "mlflow": MlflowTracker, "wandb": WandbTracker, "tensorboard": TensorboardTracker}[name]()
