"""Run records: ``runs/<timestamp>-<name>/`` with ``manifest.json`` (config, seed, git commit and
dirtiness, data version and hash, versions, device, command line) and ``metrics.jsonl``."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from pathlib import Path

from ..errors import UserError
from ..io import atomic_write_json, atomic_write_text, read_json

MANIFEST = "manifest.json"
METRICS = "metrics.jsonl"
MAX_FOLDER_NAME = 200  # characters of a run's name in its folder name (file systems stop at 255 bytes)
MANIFEST_SCHEMA = 1  # raise it when a field changes meaning; readers of older manifests convert


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
    return {
        "commit": commit.strip(),
        "dirty": bool(status.strip()),
        "diff_sha256": hashlib.sha256(diff.encode()).hexdigest() if diff else None,
    }


def environment_info(device_name: str) -> dict:
    import numpy
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "device": device_name,
        "torch_threads": torch.get_num_threads(),
    }


def _start_ticks(pid: int) -> int | None:
    """When process pid started, in clock ticks since boot (Linux /proc), to tell it from a later process
    that reuses its pid; None where /proc is not there."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22; the command name before ")" may hold spaces


def owner_info() -> dict:
    """This process, as the owner of a run it trains."""
    pid = os.getpid()
    return {"pid": pid, "host": socket.gethostname(), "started": _start_ticks(pid)}


def process_gone(owner: dict) -> bool | None:
    """True when the process that owned a run is gone (killed, crashed, machine rebooted), False when it
    still runs, None when this machine cannot tell (another host, or no owner recorded)."""
    pid, host = owner.get("pid"), owner.get("host")
    if not isinstance(pid, int) or host != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    started = owner.get("started")
    return started is not None and _start_ticks(pid) != started


def _folder_name(name: str) -> str:
    """A run name as its folder spells it: letters, digits, '-', '_' and '.', at most MAX_FOLDER_NAME bytes."""
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
    return safe.encode("utf-8")[:MAX_FOLDER_NAME].decode("utf-8", errors="ignore") or "run"


def check_runs_root(runs_dir: str | Path) -> Path:
    """runs_dir as a Path, once it is known that run folders can be made in it (it is a writable folder, or the
    nearest folder above it that exists is): a UserError naming it otherwise. Nothing is created, so work that
    is refused for it leaves the disk as it was."""
    root = Path(runs_dir)
    fix = "set runs_dir (--runs-dir) to a writable folder"
    if root.exists() and not root.is_dir():
        raise UserError(f"the runs folder {root} is a file, not a folder; {fix}")
    above = next(p for p in (root, *root.absolute().parents) if p.exists())
    if not above.is_dir():
        raise UserError(f"cannot create the runs folder {root}: {above} is a file; {fix}")
    if not os.access(above, os.W_OK | os.X_OK):
        raise UserError(f"cannot create run folders in {root}: {above} is not writable; {fix}")
    return root


def new_run_dir(runs_dir: str | Path, name: str) -> Path:
    """A fresh, empty ``<runs_dir>/<YYYYmmdd-HHMMSS>-<name>`` (suffixed if the second is taken)."""
    root = Path(runs_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the runs folder {root}: {e.strerror}; set runs_dir to a writable folder") from None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = _folder_name(name)
    for i in range(1000):
        path = root / (f"{stamp}-{safe}" + (f"-{i}" if i else ""))
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
        except OSError as e:  # read-only, full, or a name the file system refuses
            raise UserError(
                f"cannot create a run folder in {root}: {e.strerror}; set runs_dir to a writable folder (--set runs_dir=...)"
            ) from None
    raise UserError(f"cannot find a free run folder name under {root}")


class RunStatus(str, Enum):
    """What a run's manifest says about it. Only training changes it (nanolm.training.record.RunRecord)."""

    RUNNING = "running"
    FINISHED = "finished"  # reached its last step
    STOPPED = "stopped"  # stopped at --stop-at; resumable
    DIVERGED = "diverged"  # a NaN or inf loss or gradient norm; the last good checkpoint stays
    INTERRUPTED = "interrupted"  # Ctrl-C; checkpointed and resumable

    def __str__(self) -> str:
        return self.value


@dataclass
class RunFinal:
    """A run's final numbers: all of them when it finished or stopped, step and diverged_at when it diverged."""

    step: int
    train_loss: float | None = None  # nats/token on the fixed train eval batches
    val_loss: float | None = None  # nats/token on the fixed val eval batches
    tokens_per_s: float | None = None
    seconds: float | None = None
    diverged_at: int | None = None
    steady_tokens_per_s: float | None = None  # the median step's, after warm-up and compile (tokens_per_s averages them in)

    def metrics(self) -> dict[str, float]:
        """The recorded metrics by name (those a comparison can use)."""
        return {k: v for k, v in asdict(self).items() if isinstance(v, float) and k not in ("step", "diverged_at")}

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


MODEL_FIELDS = ("n_layer", "n_head", "d_model", "block_size", "pos", "tie_embeddings")  # TrainConfig's, from a preset


@dataclass
class Manifest:
    """``manifest.json``: everything needed to know what a run was and to redo it. Every reader goes
    through this class; keys it does not know (a newer version's) are kept in `extra` and written back."""

    name: str = ""
    run_dir: str = ""
    created: str = ""  # ISO time
    status: RunStatus = RunStatus.RUNNING
    command: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)  # the full TrainConfig as a dict
    model_config: dict = field(default_factory=dict)
    n_params: int | None = None
    n_params_non_embedding: int | None = None  # the N of 6N
    seed: int | None = None
    determinism: dict = field(default_factory=dict)
    git: dict = field(default_factory=dict)  # commit, dirty, diff_sha256
    data: dict = field(default_factory=dict)  # source, version, sha256, tokenizer, vocab_size, token counts
    unigram_entropy: float | None = None  # nats/token: the no-context baseline
    environment: dict = field(default_factory=dict)  # python, torch, numpy, platform, device, threads
    resumes: list[dict] = field(default_factory=list)  # one per --resume: from_step, command, git
    final: RunFinal | None = None
    trackers: dict = field(default_factory=dict)  # tracker run ids, so a resume continues the same run
    owner: dict = field(default_factory=dict)  # the process training it: pid, host, started (see process_gone)
    checkpoint_step: int | None = None  # the step of the newest checkpoint: where a resume starts
    # data-parallel runs: world_size, backend, launcher, run_id and each rank (pid, host, device, what it read);
    # absent for one process
    distributed: dict = field(default_factory=dict)
    schema: int = MANIFEST_SCHEMA
    extra: dict = field(default_factory=dict)

    @property
    def data_version(self) -> str | None:
        version = self.data.get("version")
        return version if isinstance(version, str) else None

    @property
    def data_sha256(self) -> str | None:
        sha = self.data.get("sha256")
        return sha if isinstance(sha, str) and sha else None

    def config_as_trained(self) -> dict:
        """The saved config, with each model field its preset filled in (None in the config) pinned to what the run
        trained (model_config): a preset may change between versions (gpt2-124m ties W_U since 2026-12-04), and a
        run resumes as the model it is."""
        values = dict(self.config)
        for key in MODEL_FIELDS:
            if values.get(key) is None and key in self.model_config:
                values[key] = self.model_config[key]
        return values

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("extra", "final", "status")}
        out["status"] = self.status.value
        if self.final is not None:
            out["final"] = self.final.to_dict()
        # absent rather than empty, as before they existed
        for optional in ("trackers", "owner", "checkpoint_step", "distributed"):
            if not out[optional] and out[optional] != 0:
                del out[optional]
        return {**out, **self.extra}

    @classmethod
    def from_dict(cls, raw: dict, where: str | Path = "manifest") -> Manifest:
        """Check every known key's type (a UserError naming the key otherwise); keep unknown keys."""
        known = {f.name for f in fields(cls)} - {"extra"}
        values = {k: v for k, v in raw.items() if k in known}
        for key in [k for k, v in values.items() if v is None and _MANIFEST_TYPES.get(k) in (dict, list)]:
            del values[key]  # null where an object or a list belongs: the empty default, not a crash later
        for key, want in _MANIFEST_TYPES.items():
            if key in values and values[key] is not None and not isinstance(values[key], want):
                raise UserError(
                    f"{where}: corrupt manifest ({key} is {type(values[key]).__name__}); restore it or delete the run"
                )
        if "status" in values:
            try:
                values["status"] = RunStatus(values["status"])
            except ValueError:
                raise UserError(f"{where}: corrupt manifest (unknown status {values['status']!r})") from None
        if values.get("final") is not None:
            values["final"] = _run_final(values["final"], where)
        return cls(**values, extra={k: v for k, v in raw.items() if k not in known})


_MANIFEST_TYPES: dict[str, type | tuple[type, ...]] = {
    "config": dict,
    "name": str,
    "run_dir": str,
    "created": str,
    "status": str,
    "command": list,
    "model_config": dict,
    "n_params": int,
    "n_params_non_embedding": int,
    "seed": int,
    "determinism": dict,
    "git": dict,
    "data": dict,
    "unigram_entropy": (int, float),
    "environment": dict,
    "resumes": list,
    "final": dict,
    "trackers": dict,
    "owner": dict,
    "checkpoint_step": int,
    "distributed": dict,
    "schema": int,
}


def _run_final(raw: dict, where: str | Path) -> RunFinal:
    try:
        final = RunFinal(**{k: v for k, v in raw.items() if k in RunFinal.__dataclass_fields__})
    except TypeError:
        raise UserError(f"{where}: corrupt manifest (final has no step)") from None
    bad = [k for k, v in asdict(final).items() if v is not None and not isinstance(v, (int, float))]
    if bad:
        raise UserError(f"{where}: corrupt manifest (final {bad[0]} is not a number)")
    return final


def find_launched_run(runs_dir: str | Path, run_id: str) -> Path | None:
    """The run folder under runs_dir whose manifest records the launch `run_id` (nanolm train --nproc finds
    the run its ranks made this way), or None."""
    root = Path(runs_dir)
    for path in sorted(root.glob(f"*/{MANIFEST}"), reverse=True) if root.is_dir() else []:
        try:
            raw = read_json(path)
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(raw, dict) and isinstance(raw.get("distributed"), dict) and raw["distributed"].get("run_id") == run_id:
            return path.parent
    return None


def write_manifest(run_dir: Path, manifest: Manifest) -> None:
    atomic_write_json(Path(run_dir) / MANIFEST, manifest.to_dict())


def read_manifest(run_dir: str | Path) -> Manifest:
    path = Path(run_dir) / MANIFEST
    if not path.is_file():
        raise UserError(f"{run_dir}: not a nanolm run (no {MANIFEST}); give a folder under runs/")
    try:
        raw = read_json(path)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"{path}: corrupt manifest (not JSON)") from None
    if not isinstance(raw, dict):
        raise UserError(f"{path}: corrupt manifest (not a JSON object)")
    if not isinstance(raw.get("config"), dict):
        raise UserError(f"{run_dir}: not a nanolm run ({MANIFEST} has no config); give a folder under runs/")
    return Manifest.from_dict(raw, path)


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
                row = json.loads(line)
            except json.JSONDecodeError:
                row = None
            if not isinstance(row, dict):  # "[1]" parses, but is no row of the log either
                raise UserError(
                    f"{path}:{i}: not a JSON object (the metrics log was edited or cut short); repair or remove that line"
                )
            rows.append(row)
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
    problem: str | None = None  # why an unreadable run could not be read


def list_runs(runs_dir: str | Path = "runs") -> list[RunSummary]:
    """Every run under runs_dir, oldest first; one whose manifest cannot be read has status "unreadable"
    and says why in `problem`."""
    root = Path(runs_dir)
    if root.exists() and not root.is_dir():
        raise UserError(f"--runs-dir {root}: is a file, not a folder of runs; give the folder runs are written to")
    out = []
    for path in sorted(p for p in root.glob("*") if (p / MANIFEST).is_file()) if root.is_dir() else []:
        try:
            m = read_manifest(path)
        except UserError as e:  # shown, not hidden: the listing is where a user looks for their runs
            out.append(RunSummary(path, path.name, "", UNREADABLE, None, None, None, None, None, None, str(e)))
            continue
        steps = m.config.get("steps")
        step = m.final.step if m.final is not None else m.checkpoint_step
        out.append(
            RunSummary(
                path,
                m.name or path.name,
                m.created,
                effective_status(m),
                step,
                steps if isinstance(steps, int) else None,
                m.final and m.final.val_loss,
                m.data_version,
                m.git.get("commit"),
                m.git.get("dirty"),
            )
        )
    return out


UNREADABLE, DIED = "unreadable", "died"


def effective_status(m: Manifest) -> str:
    """The manifest's status, except that a run still marked running whose process is gone has died
    (kill -9, out of memory, a power cut): only a checkpoint survives it."""
    if m.status is RunStatus.RUNNING and process_gone(m.owner):
        return DIED
    return m.status.value


def resolve_run(ref: str | Path, runs_dir: str | Path = "runs") -> Path:
    """A run folder from a path, or from a name under runs_dir (an exact folder name, or a unique
    suffix such as the run's name)."""
    path = Path(ref)
    if (path / MANIFEST).is_file():
        return path
    root = Path(runs_dir)
    if root.is_dir():
        exact = root / str(ref)
        if (exact / MANIFEST).is_file():
            return exact
        # The runs whose manifest records this name (two started in the same second share it, one folder
        # with a -N suffix); failing that, folders that end in the name as a folder spells it.
        runs = [p for p in root.iterdir() if (p / MANIFEST).is_file()]
        matches = sorted(p for p in runs if _recorded_name(p) == str(ref))
        if not matches:
            matches = sorted(p for p in runs if p.name.endswith(f"-{_folder_name(str(ref))}"))
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            shown = ", ".join(p.name for p in matches[:5]) + (", ..." if len(matches) > 5 else "")
            raise UserError(f"run {ref!r} is ambiguous: {len(matches)} runs match ({shown}); give one of those folder names")
    if path.exists():
        raise UserError(f"{ref}: not a nanolm run (no {MANIFEST}); give a folder under {runs_dir}/")
    raise UserError(
        f"run {ref!r} not found (no such folder, and no run of that name in {runs_dir}/); list runs with: nanolm runs"
    )


def _recorded_name(run_dir: Path) -> str | None:
    """The name a run's manifest records, or None when it cannot be read."""
    try:
        return read_manifest(run_dir).name or None
    except UserError:
        return None


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
