"""Where each kind of result lives in a run's folder: the one place that knows a result's folder name.

A run keeps what the tools made from it beside its record (``nanolm.runs.store``)::

    RUN/manifest.json, metrics.jsonl, checkpoints/     the run (nanolm train)
    RUN/<folder>/...                                   one folder per kind of result, below

Each kind is an `Artifact`: its folder, the command that writes it, and the files a reader looks for in
it, by role (a glob inside the folder). The commands save through it (``STEERING.path(run, "x.json",
create=True)``), the report finds through it (``STEERING.find(run, "sweep")``), and a file given on the
command line is traced back to its run through it (``FEEDBACK.run_holding(path)``). A new kind of result
is one more `Artifact` here, added to ARTIFACTS."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from .store import MANIFEST

HF_CONFIG = "config.json"  # what makes a folder a Hugging Face model


@dataclass(frozen=True)
class Artifact:
    """One kind of result a run keeps: ``RUN/<folder>/``, written by `written_by`; `files` maps a role
    ("sweep", "cfg", ...) to the glob its files match inside the folder ("*.json", "*/cfg.json")."""

    folder: str
    written_by: str
    files: Mapping[str, str]

    def dir(self, run_dir: str | Path, create: bool = False) -> Path:
        """``RUN/<folder>/``; a writer passes create=True (a reader never leaves an empty folder behind)."""
        return artifact_dir(run_dir, self.folder, create)

    def path(self, run_dir: str | Path, name: str, create: bool = False) -> Path:
        """``RUN/<folder>/<name>`` (with create=True the folder is made first, so the file can be written)."""
        return self.dir(run_dir, create) / name

    def pattern(self, role: str) -> str:
        """The glob of a role's files relative to the run's folder ("steering/*.json")."""
        return f"{self.folder}/{self.files[role]}"

    def find(self, run_dir: str | Path, role: str) -> list[Path]:
        """The run's files of a role, sorted by path; hidden files and folders (a write in progress) left out."""
        run = Path(run_dir)
        return sorted(
            p
            for p in run.glob(self.pattern(role))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(run).parts)
        )

    def run_holding(self, path: str | Path) -> Path | None:
        """The nanolm run whose ``<folder>/`` holds path (a file, or a result's own folder such as RUN/sae/NAME),
        or None when path is somewhere else."""
        folder = Path(path).resolve().parent
        return folder.parent if folder.name == self.folder and is_run(folder.parent) else None

    def outside_runs(self, create: bool = False) -> Path:
        """``runs/<folder>/``: where the results of a model that is not a nanolm run go (a Hugging Face folder),
        so nothing lands in the working folder."""
        where = Path("runs") / self.folder
        if create:
            try:
                where.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise UserError(f"cannot create {where}: {e.strerror}; name the output file with its option") from None
        return where

    def loose(self, name: str) -> Path:
        """``runs/<folder>/<time>-<name>``: a new name each time in outside_runs() (created), for a result with no
        run to keep it."""
        stem, _, suffix = name.partition(".")
        return _fresh(self.outside_runs(create=True), f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}", f".{suffix}")

    def timestamped(self, run_dir: str | Path, suffix: str = ".json") -> Path:
        """``RUN/<folder>/<time><suffix>`` (the folder created), a name that no file of the folder starts with yet
        (RUN/profiles/<time>.json beside its <time>-trace.json): a new one each time, so the newest can be found."""
        return _fresh(self.dir(run_dir, create=True), time.strftime("%Y%m%d-%H%M%S"), suffix)


def _fresh(folder: Path, stem: str, suffix: str) -> Path:
    """folder/<stem><suffix>, or <stem>-1, -2 ... when a file of the folder already starts with that stem."""
    taken = {p.name.split(".")[0] for p in folder.iterdir()}
    names = (f"{stem}-{i}" if i else stem for i in range(1000))
    name = next(n for n in names if n not in taken and not any(t.startswith(f"{n}-") for t in taken))
    return folder / f"{name}{suffix}"


def artifact_dir(run_dir: str | Path, folder: str, create: bool = False) -> Path:
    """``<run>/<folder>/`` for a folder name (prefer an Artifact's .dir). A writer passes create=True. Files in
    it are written atomically through nanolm.io."""
    if not folder or not all(c.isalnum() or c in "-_" for c in folder):
        raise ValueError(f"artifact folder {folder!r}: letters, digits, '-' and '_' only")
    path = Path(run_dir) / folder
    if not create:
        return path
    try:
        path.mkdir(exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create {path}: {e.strerror}; make the run folder writable") from None
    return path


def is_run(folder: str | Path) -> bool:
    """Whether a folder is a nanolm run (it has a manifest)."""
    return (Path(folder) / MANIFEST).is_file()


def is_hf_model(folder: str | Path) -> bool:
    """Whether a folder is a Hugging Face model saved locally (config.json) rather than a nanolm run."""
    return (Path(folder) / HF_CONFIG).is_file() and not is_run(folder)


PROFILES = Artifact("profiles", "nanolm profile --run RUN", {"report": "*.json", "trace": "*-trace.json*"})
LENS = Artifact("lens", "nanolm lens RUN, lens eval RUN", {"result": "*.json"})
TUNED_LENS = Artifact("tuned_lens", "nanolm lens train RUN", {"meta": "tuned_lens.json", "weights": "translators.safetensors"})
PROBES = Artifact("probes", "nanolm probe RUN (with --intervene: the intervention too)", {"result": "*.json"})
FIGURES = Artifact(
    "figures",
    "nanolm lens / probe / steer sweep (their figures)",
    {"lens": "lens*.png", "probe": "probe-*.png", "steer": "steer-sweep-*.png"},
)
SAE = Artifact(
    "sae",
    "nanolm sae train, sae eval, sae sweep",
    {
        "cfg": "*/cfg.json",
        "eval": "*/eval.json",
        "density": "*/density.png",
        "sweep": "sweep-*.json",
        "sweep_plot": "sweep-*.png",
    },
)
STEERING = Artifact("steering", "nanolm steer sweep RUN", {"sweep": "*.json"})
SYCOPHANCY = Artifact("sycophancy", "nanolm sycophancy RUN", {"records": "*.jsonl", "summary": "*.json"})
FEEDBACK = Artifact(
    "feedback", "nanolm feedback pairs / label / bias", {"pairs": "*.jsonl", "labels": "*-labels.jsonl", "bias": "*.json"}
)
REWARD_MODELS = Artifact("reward_models", "nanolm feedback reward-model", {"model": "*/reward_model.json"})
BEST_OF_N = Artifact("best_of_n", "nanolm feedback best-of-n", {"result": "*.jsonl", "plot": "*.png"})
CLAIMS = Artifact("claims", "nanolm claims kv --run RUN", {"kv": "kv*.json"})

ARTIFACTS: tuple[Artifact, ...] = (
    PROFILES,
    LENS,
    TUNED_LENS,
    PROBES,
    FIGURES,
    SAE,
    STEERING,
    SYCOPHANCY,
    FEEDBACK,
    REWARD_MODELS,
    BEST_OF_N,
    CLAIMS,
)
