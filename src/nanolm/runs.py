"""Run records: ``runs/<timestamp>-<name>/`` with ``manifest.json`` (config, seed, git commit and
dirtiness, data version and hash, versions, device, command line) and ``metrics.jsonl``."""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError
from .io import atomic_write_json, atomic_write_text, read_json

MANIFEST = "manifest.json"
METRICS = "metrics.jsonl"


def git_info(cwd: str | Path = ".") -> dict:
    """Commit of the working directory's repository, whether the tree is dirty, and a hash of the
    uncommitted diff (so two dirty runs can be told apart). All None outside a git repository."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=30, check=True)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.decode("utf-8", errors="replace")

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "dirty": None, "diff_sha256": None}
    status = git("status", "--porcelain", "--untracked-files=no") or ""
    diff = git("diff", "HEAD") or ""
    return {"commit": commit.strip(), "dirty": bool(status.strip()),
            "diff_sha256": hashlib.sha256(diff.encode()).hexdigest() if diff else None}


def environment_info(device_name: str) -> dict:
    import numpy
    import torch

    return {"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
            "platform": platform.platform(), "device": device_name, "torch_threads": torch.get_num_threads()}


def new_run_dir(runs_dir: str | Path, name: str) -> Path:
    """A fresh, empty ``<runs_dir>/<YYYYmmdd-HHMMSS>-<name>`` (suffixed if the second is taken)."""
    root = Path(runs_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the runs folder {root}: {e.strerror}; set runs_dir to a writable folder") from None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name) or "run"
    for i in range(1000):
        path = root / (f"{stamp}-{safe}" + (f"-{i}" if i else ""))
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise UserError(f"cannot find a free run folder name under {root}")


def write_manifest(run_dir: Path, manifest: dict) -> None:
    atomic_write_json(run_dir / MANIFEST, manifest)


def read_manifest(run_dir: str | Path) -> dict:
    path = Path(run_dir) / MANIFEST
    if not path.is_file():
        raise UserError(f"{run_dir}: not a nanolm run (no {MANIFEST}); give a folder under runs/")
    try:
        manifest = read_json(path)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"{path}: corrupt manifest (not JSON)") from None
    if not isinstance(manifest, dict):
        raise UserError(f"{path}: corrupt manifest (not a JSON object)")
    if not isinstance(manifest.get("config"), dict):
        raise UserError(f"{run_dir}: not a nanolm run ({MANIFEST} has no config); give a folder under runs/")
    return manifest


class MetricsLog:
    """metrics.jsonl, one JSON object per logged step, kept in memory and rewritten atomically."""

    def __init__(self, path: Path, keep_through_step: int | None = None) -> None:
        self.path = path
        self.rows = [r for r in read_metrics(path) if keep_through_step is None or r.get("step", 0) <= keep_through_step]
        if keep_through_step is not None:
            self.flush()  # drop what an interrupted run logged after its last checkpoint

    def append(self, row: dict) -> None:
        self.rows.append(row)
        self.flush()

    def flush(self) -> None:
        atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in self.rows))


def read_metrics(path: str | Path) -> list[dict]:
    path = Path(path)
    if path.is_dir():
        path = path / METRICS
    if not path.is_file():
        return []
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                raise UserError(f"{path}:{i}: not a JSON object (the metrics log was edited or cut short); "
                                "repair or remove that line") from None
    return rows


@dataclass
class RunSummary:
    path: Path
    name: str
    created: str
    status: str
    step: int | None
    steps: int | None
    val_loss: float | None
    data_version: str | None
    commit: str | None
    dirty: bool | None


def list_runs(runs_dir: str | Path = "runs") -> list[RunSummary]:
    """Every run under runs_dir with a readable manifest, oldest first."""
    root = Path(runs_dir)
    out = []
    for path in sorted(p for p in root.glob("*") if (p / MANIFEST).is_file()) if root.is_dir() else []:
        try:
            m = read_manifest(path)
        except UserError:
            continue
        final = m.get("final") or {}
        git = m.get("git") or {}
        out.append(RunSummary(path, m.get("name", path.name), m.get("created", ""), m.get("status", "?"),
                              final.get("step"), (m.get("config") or {}).get("steps"), final.get("val_loss"),
                              (m.get("data") or {}).get("version"), git.get("commit"), git.get("dirty")))
    return out


def resolve_run(ref: str | Path, runs_dir: str | Path = "runs") -> Path:
    """A run folder from a path, or from a name under runs_dir (an exact folder name, or a unique
    suffix such as the run's name)."""
    path = Path(ref)
    if (path / MANIFEST).is_file():
        return path
    root = Path(runs_dir)
    if root.is_dir():
        matches = sorted(p for p in root.iterdir() if (p / MANIFEST).is_file()
                         and (p.name == str(ref) or p.name.endswith(f"-{ref}")))
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            names = ", ".join(p.name for p in matches[-3:])
            raise UserError(f"run {ref!r} is ambiguous ({len(matches)} runs: ...{names}); give the folder path")
    if path.exists():
        raise UserError(f"{ref}: not a nanolm run (no {MANIFEST}); give a folder under {runs_dir}/")
    raise UserError(f"run {ref!r} not found (no such folder, and no run of that name in {runs_dir}/); "
                    "list runs with: nanolm runs")


def artifact_dir(run_dir: str | Path, kind: str) -> Path:
    """``<run>/<kind>/``, the one place a tool keeps what it made from a run ("tuned_lens", "sae",
    "evals", ...); created on first use. Files in it are written atomically through nanolm.io."""
    if not kind or not all(c.isalnum() or c in "-_" for c in kind):
        raise ValueError(f"artifact kind {kind!r}: letters, digits, '-' and '_' only")
    path = Path(run_dir) / kind
    try:
        path.mkdir(exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create {path}: {e.strerror}; make the run folder writable") from None
    return path


def weights_fingerprint(weight) -> float:
    """A number that tells one model's weight matrix from another's of the same shape (names change,
    weights don't): the sum of the weights, each column scaled by a ramp from 1 to 2, in float64.
    An artifact records its model's fingerprint and compares it on load (``same_fingerprint``)."""
    import torch

    w = weight.detach().double()
    ramp = torch.linspace(1.0, 2.0, w.shape[-1], dtype=torch.float64, device=w.device)
    return float((w * ramp).sum())


def same_fingerprint(a: float, b: float) -> bool:
    """Equal up to float32 rounding of the weights (a model moved between devices keeps its fingerprint)."""
    import math

    return math.isclose(a, b, rel_tol=1e-6)


def command_line() -> list[str]:
    return list(sys.argv)
