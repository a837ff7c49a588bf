"""Find the commit that broke a metric: ``git bisect run`` with a check that trains a short run of
each commit's own code and compares one final metric with a threshold.

The user's working tree is never touched: the bisection runs in a temporary detached worktree (bisect
state and ``refs/bisect/*`` are per worktree), each training runs with ``PYTHONPATH`` pointing at that
worktree's source and in a scratch folder, and the worktree is removed afterwards, also on Ctrl-C.

The check is this module run as ``python -m nanolm.repro.bisect --check SPEC.json``; it exits 0 (good),
1 (bad) or 125 (skip: the commit has no nanolm, its training fails or times out, or the value is within
noise of the threshold), as ``git bisect run`` expects. It prints one ``nanolm-bisect-step {json}``
line per commit, which the driver collects."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import UserError
from ..runs import MANIFEST

METRICS = ("val_loss", "train_loss", "tokens_per_s", "seconds")  # in TrainResult and the manifest's "final"
STEP_MARK = "nanolm-bisect-step "
EXIT = {"good": 0, "bad": 1, "skip": 125}
GIT_TIMEOUT_S = 120


class BisectFailed(UserError):
    """git bisect stopped without an answer for a reason other than bad input."""

    exit_code = 1


@dataclass
class BisectStep:
    commit: str
    metric_value: float | None
    outcome: str  # "good", "bad" or "skip"
    reason: str


@dataclass
class BisectResult:
    first_bad: str | None  # None when skipped commits hide it (see candidates)
    subject: str  # the first bad commit's subject line, "" when unknown
    steps: list[BisectStep]  # the two endpoints first, then each commit git bisect tested
    log: str  # git bisect's own output
    candidates: list[str] = field(default_factory=list)  # when first_bad is None: it is one of these


# ---- git --------------------------------------------------------------------------------------------


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except FileNotFoundError:
        raise UserError("git is not installed (or not on PATH); bisect needs git") from None
    if check and proc.returncode != 0:
        detail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise BisectFailed(f"git {' '.join(args)} failed: {detail[-1] if detail else f'exit {proc.returncode}'}")
    return proc


def _toplevel(repo: Path) -> tuple[Path, str]:
    """The repository's top folder, and where repo is inside it ("" or e.g. "ml/nanolm/")."""
    if not repo.is_dir():
        raise UserError(f"{repo}: no such folder; run nanolm bisect inside your project's git clone")
    proc = _git(repo, "rev-parse", "--show-toplevel", "--show-prefix", check=False)
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or not lines or not lines[0].strip():
        raise UserError(
            f"{repo} is not inside a git repository (with a working tree); run nanolm bisect inside your project's git clone"
        )
    return Path(lines[0].strip()), (lines[1].strip() if len(lines) > 1 else "")


def _require_clean(top: Path) -> None:
    status = _git(top, "status", "--porcelain", "--untracked-files=no").stdout
    if status.strip():
        first = status.splitlines()[0][3:]
        raise UserError(
            f"the working tree has uncommitted changes (e.g. {first}): bisect checks out commits, so "
            "your changes could not be mixed in; commit or stash them first (git stash)"
        )


def _resolve(top: Path, rev: str, option: str) -> str:
    proc = _git(top, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}", check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise UserError(f"{option} {rev!r}: no such commit in {top}; give a commit, tag or branch (see git log)")
    return proc.stdout.strip()


# ---- the check: one commit ----------------------------------------------------------------------------


def judge(
    value: float, threshold: float, higher_is_better: bool = False, noise: float = 0.0, metric: str = "metric"
) -> tuple[str, str]:
    """("good" | "bad" | "skip", reason) for a measured value."""
    if not math.isfinite(value):
        return "bad", f"{metric} is {value}"
    if noise > 0 and abs(value - threshold) <= noise:
        return "skip", f"{metric} {value:.4g} is within noise {noise:g} of the threshold {threshold:g}"
    good = value >= threshold if higher_is_better else value <= threshold
    relation = (">=" if good else "<") if higher_is_better else ("<=" if good else ">")
    return ("good" if good else "bad"), f"{metric} {value:.4g} {relation} threshold {threshold:g}"


def _source_root(tree: Path, prefix: str = "") -> Path | None:
    """The folder to put on PYTHONPATH so that ``import nanolm`` finds this tree's code: src/ or the
    top, under prefix (where in the repository bisect was started) first."""
    for root in (tree / prefix / "src", tree / prefix, tree / "src", tree):
        if (root / "nanolm" / "__init__.py").is_file():
            return root
    return None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def check_commit(tree: Path, spec: dict) -> BisectStep:
    """Train the code checked out in tree with spec's overrides and judge spec's metric."""
    commit = _git(tree, "rev-parse", "HEAD").stdout.strip()
    metric = spec["metric"]

    def skip(reason: str) -> BisectStep:
        return BisectStep(commit, None, "skip", reason)

    root = _source_root(tree, spec.get("prefix", ""))
    if root is None:
        return skip("no nanolm package in this commit (neither src/nanolm/ nor nanolm/)")
    scratch = Path(tempfile.mkdtemp(prefix="run-", dir=spec.get("scratch")))
    try:
        runs = scratch / "runs"
        cmd = [
            sys.executable,
            "-m",
            "nanolm",
            "train",
            *[a for kv in spec["overrides"] for a in ("--set", kv)],
            "--set",
            f"runs_dir={runs}",
            "--quiet",
            "--json",
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env["PYTHONPATH"] = str(root)
        try:
            proc = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True, timeout=spec["timeout_s"])
        except subprocess.TimeoutExpired:
            return skip(f"training timed out after {spec['timeout_s']:g} s")
        manifests = sorted(runs.glob(f"*/{MANIFEST}"))
        manifest: dict = {}
        if manifests:
            with contextlib.suppress(OSError, ValueError):
                manifest = json.loads(manifests[-1].read_text(encoding="utf-8"))
        if manifest.get("status") == "diverged":  # a real regression, not a broken build
            return BisectStep(commit, None, "bad", f"training diverged: {_last_line(proc.stderr)}")
        if proc.returncode != 0:
            return skip(f"training failed (exit {proc.returncode}): {_last_line(proc.stderr) or _last_line(proc.stdout)}")
        value = None
        with contextlib.suppress(ValueError):
            result = json.loads(proc.stdout)
            value = result.get(metric) if isinstance(result, dict) else None
        if value is None:
            value = (manifest.get("final") or {}).get(metric)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return skip(f"no {metric} in the training result")
        outcome, reason = judge(float(value), spec["threshold"], spec["higher_is_better"], spec["noise"], metric)
        return BisectStep(commit, float(value), outcome, reason)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _check_main(argv: list[str]) -> int:
    """``python -m nanolm.repro.bisect --check SPEC.json``, run by git bisect in the worktree."""
    if len(argv) != 2 or argv[0] != "--check":
        print("usage: python -m nanolm.repro.bisect --check SPEC.json (run by nanolm bisect)", file=sys.stderr)
        return 128  # >= 128 makes git bisect run stop instead of marking the commit
    try:
        spec = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
        step = check_commit(Path(spec["tree"]), spec)
    except KeyboardInterrupt:
        return 130
    except Exception:  # a bug in the check must stop the bisection, not mark the commit bad
        traceback.print_exc()
        return 128
    print(STEP_MARK + json.dumps(asdict(step)), flush=True)
    return EXIT[step.outcome]


# ---- the driver ---------------------------------------------------------------------------------------


def _check_command(spec_path: Path) -> tuple[list[str], dict[str, str]]:
    """The check's argv, and its environment: this nanolm's code (the commits under test may predate
    bisect), and no current folder on sys.path (a commit's own nanolm/ must not shadow it)."""
    here = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(here), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONSAFEPATH"] = "1"
    return [sys.executable, "-m", "nanolm.repro.bisect", "--check", str(spec_path)], env


def _stream(
    cmd: list[str], cwd: Path, env: dict[str, str], steps: list[BisectStep], on_step: Callable[[BisectStep], None] | None
) -> tuple[int, str]:
    """Run cmd, collecting its output and the check's step lines as they come."""
    # In its own process group, so that on Ctrl-C (or any error) git, the check and the training
    # under it are all ended, not left running against a worktree that is being removed.
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    out = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line)
            if line.startswith(STEP_MARK):
                step = BisectStep(**json.loads(line[len(STEP_MARK) :]))
                steps.append(step)
                if on_step is not None:
                    on_step(step)
    finally:
        _kill_group(proc)
    return proc.returncode, "".join(out)


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill whatever still runs in proc's group (all of it on Ctrl-C; orphans otherwise), then reap
    proc. Its group id cannot have been reused yet: proc, its leader, is not reaped before this."""
    if hasattr(os, "killpg"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    else:
        proc.kill()
    proc.wait()


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Ctrl-C is held back while the repository is being restored (so a second one cannot leave a
    worktree behind), then re-raised."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    hit: list[bool] = []
    previous = signal.signal(signal.SIGINT, lambda *_: hit.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if hit:
        raise KeyboardInterrupt


def _packed_refs(top: Path) -> Path:
    common = Path(_git(top, "rev-parse", "--git-common-dir").stdout.strip())
    return (top / common if not common.is_absolute() else common) / "packed-refs"


def _cleanup(top: Path, tmp: Path, packed_refs: Path | None) -> None:
    """End the bisection and remove the worktree (whatever state either is in), then tmp; and the
    empty packed-refs file that git bisect start creates (deleting old bisect refs) if there was none."""
    tree = tmp / "tree"
    if (tree / ".git").is_file():  # a worktree (else git would look for a repository above it)
        _git(tree, "bisect", "reset", "--quiet", check=False)
    if tree.exists():
        _git(top, "worktree", "remove", "--force", str(tree), check=False)
    shutil.rmtree(tmp, ignore_errors=True)
    _git(top, "worktree", "prune", check=False)  # forgets the worktree if remove could not
    if packed_refs is not None:
        with contextlib.suppress(OSError):
            if not [line for line in packed_refs.read_text().splitlines() if not line.startswith("#")]:
                packed_refs.unlink()


def _parse_first_bad(output: str) -> tuple[str | None, list[str]]:
    found = re.findall(r"^([0-9a-f]{40,64}) is the first bad commit", output, re.MULTILINE)
    if found:
        return found[-1], []
    if "first bad commit could be any of" in output:
        tail = output.split("first bad commit could be any of", 1)[1]
        return None, re.findall(r"^([0-9a-f]{40,64})\s*$", tail, re.MULTILINE)
    return None, []


PATH_KEYS = ("data",)  # config keys that name a file: each run trains in its own scratch folder


def absolute_paths(overrides: list[str]) -> list[str]:
    """overrides with relative file paths made absolute against this process's working directory."""
    out = []
    for kv in overrides:
        key, _, value = kv.partition("=")
        if (
            key.strip() in PATH_KEYS
            and value.strip().lower() not in ("", "none", "null")
            and not Path(value.strip()).expanduser().is_absolute()
        ):
            kv = f"{key}={Path(value.strip()).expanduser().resolve()}"
        out.append(kv)
    return out


def bisect_metric(
    repo: str | Path,
    good: str,
    bad: str,
    metric: str,
    threshold: float,
    overrides: list[str],
    higher_is_better: bool = False,
    noise: float = 0.0,
    timeout_s: float = 600,
    on_step: Callable[[BisectStep], None] | None = None,
) -> BisectResult:
    """The first commit after good (up to bad) whose short training run's metric is on the wrong side
    of threshold: lower is better unless higher_is_better; within noise of threshold counts as skip.

    Both endpoints are measured first (good must be good and bad bad, else UserError). overrides are
    ``key=value`` config overrides for every run. on_step is called with each measured commit.
    The repository is left as found: HEAD, branch, index, working tree, no bisect state or worktree."""
    from ..config import parse_overrides

    if metric not in METRICS:
        raise UserError(f"--metric {metric!r} is not a training result; use one of {', '.join(METRICS)}")
    if not math.isfinite(threshold):
        raise UserError(f"--threshold must be a finite number, got {threshold}")
    if not (noise >= 0 and math.isfinite(noise)):
        raise UserError(f"--noise must be >= 0, got {noise}")
    if not timeout_s > 0:
        raise UserError(f"--timeout must be > 0 seconds, got {timeout_s}")
    parse_overrides(list(overrides))  # a typo is reported now, not as a skip at every commit
    top, prefix = _toplevel(Path(repo))
    good_sha, bad_sha = _resolve(top, good, "--good"), _resolve(top, bad, "--bad")
    if good_sha == bad_sha:
        raise UserError(f"--good {good} and --bad {bad} are the same commit; give an older good commit")
    if _git(top, "merge-base", "--is-ancestor", good_sha, bad_sha, check=False).returncode != 0:
        raise UserError(
            f"--good {good} is not an ancestor of --bad {bad}; the good commit must come before the bad one (swapped?)"
        )
    _require_clean(top)

    packed_refs = _packed_refs(top)
    packed_refs = None if packed_refs.exists() else packed_refs  # ours to remove if it is empty afterwards
    tmp = Path(tempfile.mkdtemp(prefix="nanolm-bisect-"))
    tree, spec_path = tmp / "tree", tmp / "spec.json"
    steps: list[BisectStep] = []
    try:
        spec = {
            "tree": str(tree),
            "prefix": prefix,
            "scratch": str(tmp),
            "metric": metric,
            "threshold": float(threshold),
            "higher_is_better": bool(higher_is_better),
            "noise": float(noise),
            "timeout_s": float(timeout_s),
            "overrides": absolute_paths(list(overrides)),
        }
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        cmd, env = _check_command(spec_path)
        _git(top, "worktree", "add", "--detach", "--quiet", str(tree), good_sha)
        for option, rev, sha, want in (("--good", good, good_sha, "good"), ("--bad", bad, bad_sha, "bad")):
            _git(tree, "checkout", "--quiet", "--detach", sha)
            n = len(steps)
            code, out = _stream(cmd, tree, env, steps, on_step)
            if code >= 128 or len(steps) == n:
                raise BisectFailed(f"the bisect check failed at {option} {rev}: {_last_line(out) or f'exit {code}'}")
            step = steps[-1]
            if step.outcome != want:
                fix = (
                    "a commit that trains with these --set overrides"
                    if step.metric_value is None and step.outcome == "skip"
                    else f"{'an older good' if want == 'good' else 'a newer bad'} commit or another --threshold"
                )
                raise UserError(f"{option} {rev} is not {want} ({step.reason}); give {fix}")
        start = _git(tree, "bisect", "start", bad_sha, good_sha)
        log = start.stdout + start.stderr
        if _parse_first_bad(log)[0] is None:
            code, out = _stream(["git", "bisect", "run", *cmd], tree, env, steps, on_step)
            log += out
        first_bad, candidates = _parse_first_bad(log)
        if first_bad is None and not candidates:
            raise BisectFailed(f"git bisect run stopped without an answer: {_last_line(log)}")
        subject = _git(top, "log", "-1", "--format=%s", first_bad).stdout.strip() if first_bad else ""
        return BisectResult(first_bad, subject, steps, log, candidates)
    finally:
        with _sigint_deferred():
            _cleanup(top, tmp, packed_refs)


if __name__ == "__main__":
    sys.exit(_check_main(sys.argv[1:]))
