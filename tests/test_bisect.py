"""nanolm bisect: git bisect run over short training runs, in a temporary worktree, leaving the user's
repository exactly as it was (also on Ctrl-C).

The end-to-end test bisects a repository of 8 commits of nanolm's own source in which commit 5 plants a
real regression (the default lr drops to 1e-7, so val_loss stays near the untrained ln(vocab)). The
other tests use a fake ``nanolm`` package whose "training" prints a value from a file in the commit
(or crashes, or sleeps), so the skip, endpoint and Ctrl-C paths cost no training."""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

import nanolm
from nanolm.errors import UserError
from nanolm.repro.bisect import BisectStep, bisect_metric, judge

TINY = [
    "n_layer=1",
    "n_head=2",
    "d_model=32",
    "block_size=16",
    "batch_size=8",
    "steps=60",
    "eval_every=60",
    "ckpt_every=60",
    "corpus_lines=2000",
    "eval_batches=2",
]  # lr NOT set: commit 5 breaks its default
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def env(tmp_path, monkeypatch):
    """Git identity for the test repositories, no user or system git config, one torch thread per
    training, and a private temporary folder (bisect's worktree and scratch go there, and it must be
    empty afterwards)."""
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # tiny runs on a busy 2-core machine: 0.2 s instead of 10+ s
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def repo_state(repo: Path) -> dict:
    """Everything bisect must leave as it found it."""
    gitdir = repo / ".git"
    return {
        "head": git(repo, "rev-parse", "HEAD"),
        "branch": git(repo, "symbolic-ref", "-q", "HEAD"),
        "status": git(repo, "status", "--porcelain", "--untracked-files=all", "--ignored"),
        "index": git(repo, "ls-files", "--stage"),
        "worktrees": git(repo, "worktree", "list", "--porcelain"),
        "refs": git(repo, "for-each-ref"),
        "stash": git(repo, "stash", "list"),
        "bisect_files": sorted(p.name for p in gitdir.glob("BISECT_*")),
        "git_entries": sorted(p.name for p in gitdir.iterdir()),  # no BISECT_*, worktrees/, packed-refs
        "worktree_dirs": sorted(p.name for p in (gitdir / "worktrees").glob("*")),
    }


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def init_repo(repo: Path) -> None:
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")


# ---- the real thing: nanolm's own source, a planted regression -------------------------------------


def ctrl_c_as_in_a_terminal() -> None:
    """In the child: SIGINT acts as in a terminal. A test suite started in the background (nohup, `cmd &`
    in a script) inherits SIGINT ignored, and then Python never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow  # over 10 s: make test-slow (CI runs both)
def test_bisect_finds_the_commit_that_broke_val_loss(tmp_path, env):
    repo = tmp_path / "repo"
    init_repo(repo)
    shutil.copytree(Path(nanolm.__file__).parent, repo / "src" / "nanolm", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (repo / ".gitignore").write_text("__pycache__/\n/runs/\n")  # /runs/: src/nanolm/runs/ is code
    commits = [commit_all(repo, "commit 1: nanolm")]
    config = repo / "src" / "nanolm" / "config.py"
    assert "    lr: float = 3e-3\n" in config.read_text()
    for i in range(2, 9):
        if i == 5:
            config.write_text(config.read_text().replace("    lr: float = 3e-3\n", "    lr: float = 1e-7\n"))
        else:
            with (repo / "src" / "nanolm" / "train.py").open("a") as f:
                f.write(f"# harmless change {i}\n")
        commits.append(commit_all(repo, f"commit {i}" + (": lower the default lr" if i == 5 else "")))
    (repo / "notes.txt").write_text("an untracked file stays\n")  # untracked files are allowed, and kept
    before = repo_state(repo)

    seen: list[BisectStep] = []
    result = bisect_metric(repo / "src", "HEAD~7", "main", "val_loss", 5.0, TINY, on_step=seen.append)

    assert result.first_bad == commits[4], result.log
    assert result.subject == "commit 5: lower the default lr"
    assert seen == result.steps
    assert [s.outcome for s in result.steps[:2]] == ["good", "bad"]  # the endpoints, measured first
    assert [s.commit for s in result.steps[:2]] == [commits[0], commits[7]]
    for step in result.steps:
        assert step.outcome == ("bad" if commits.index(step.commit) >= 4 else "good"), step
        assert step.metric_value < 4.6 if step.outcome == "good" else step.metric_value > 5.5  # ln(vocab) ≈ 5.7
    assert len(result.steps) <= 2 + 3
    assert repo_state(repo) == before
    assert (repo / "notes.txt").read_text() == "an untracked file stays\n"
    assert list(env.iterdir()) == []  # worktree, scratch runs and spec all gone


# ---- the logic, with a fake nanolm whose "training" prints a value ---------------------------------

FAKE_MAIN = textwrap.dedent("""\
    import json, os, pathlib, sys, time
    value = (pathlib.Path(__file__).parent / "value.txt").read_text().strip()
    if value == "crash":
        sys.exit("ImportError: cannot import name 'thing' (broken on purpose)")
    if value == "sleep":
        pathlib.Path(os.environ["FAKE_PID_DIR"], str(os.getpid())).touch()
        time.sleep(120)
    print(json.dumps({"val_loss": float(value), "train_loss": float(value)}))
    """)


def fake_repo(repo: Path, values: list[str]) -> list[str]:
    """A repository of one commit per value; at each, ``python -m nanolm train ...`` prints that value."""
    init_repo(repo)
    package = repo / "src" / "nanolm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(FAKE_MAIN)
    shas = []
    for i, value in enumerate(values):
        (package / "value.txt").write_text(value + "\n")
        (repo / "commit.txt").write_text(f"{i}\n")  # every commit changes something
        shas.append(commit_all(repo, f"fake {i}: {value}"))
    return shas


def test_bisect_skips_broken_commits_and_values_within_noise(tmp_path, env):
    """Commit 1 crashes and commit 2 is within noise of the threshold: both are skipped, so the first
    bad commit is one of 1, 2, 3, and bisect says so instead of guessing."""
    repo = tmp_path / "repo"
    shas = fake_repo(repo, ["1.0", "crash", "1.95", "3.0"])
    before = repo_state(repo)
    result = bisect_metric(repo, shas[0], shas[3], "train_loss", 2.0, [], noise=0.1, timeout_s=60)
    assert result.first_bad is None and result.subject == ""
    assert sorted(result.candidates) == sorted(shas[1:]), result.log
    steps = {shas.index(s.commit): s for s in result.steps}
    assert sorted(steps) == [0, 1, 2, 3]
    assert (steps[0].outcome, steps[0].metric_value, steps[3].outcome) == ("good", 1.0, "bad")
    assert steps[1].outcome == "skip" and steps[1].metric_value is None
    assert steps[1].reason == "training failed (exit 1): ImportError: cannot import name 'thing' (broken on purpose)"
    assert (steps[2].outcome, steps[2].metric_value) == ("skip", 1.95)
    assert steps[2].reason == "train_loss 1.95 is within noise 0.1 of the threshold 2"
    assert repo_state(repo) == before
    assert list(env.iterdir()) == []


def test_endpoints_are_measured_first(tmp_path, env):
    repo = tmp_path / "repo"
    shas = fake_repo(repo, ["3.0", "3.0"])
    before = repo_state(repo)
    with pytest.raises(UserError, match=r"^--bad main is not bad \(val_loss 3 >= threshold 2\); give a newer bad commit"):
        bisect_metric(repo, shas[0], "main", "val_loss", 2.0, [], higher_is_better=True)
    with pytest.raises(UserError, match=r"^--good HEAD~1 is not good \(val_loss 3 > threshold 2\); give an older good"):
        bisect_metric(repo, "HEAD~1", "main", "val_loss", 2.0, [])
    assert repo_state(repo) == before
    assert list(env.iterdir()) == []


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists() or sys.platform == "win32", reason="needs Linux /proc")
def test_ctrl_c_during_bisect_leaves_the_repository_as_it_was(tmp_path, env):
    repo = tmp_path / "repo"
    fake_repo(repo, ["1.0", "sleep", "sleep", "sleep", "sleep", "3.0"])
    before = repo_state(repo)
    pids = tmp_path / "pids"
    pids.mkdir()
    driver = (
        "import sys; from nanolm.repro.bisect import bisect_metric; "
        "bisect_metric(sys.argv[1], 'HEAD~5', 'HEAD', 'val_loss', 2.0, [], timeout_s=100)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", driver, str(repo)],
        env={**os.environ, "TMPDIR": str(env), "FAKE_PID_DIR": str(pids)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=ctrl_c_as_in_a_terminal,
    )
    try:
        deadline = time.monotonic() + 60
        while not list(pids.iterdir()):  # the bisection is running a check's "training"
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "bisect did not start a check"
            time.sleep(0.05)
        assert list((repo / ".git" / "worktrees").glob("*/BISECT_START"))  # bisect state lives in the worktree
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the foreground group
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "KeyboardInterrupt" in err, err
    assert repo_state(repo) == before
    assert list(env.iterdir()) == []
    for pid in (int(p.name) for p in pids.iterdir()):
        deadline = time.monotonic() + 10
        while _alive(pid):
            assert time.monotonic() < deadline, f"the check's training {pid} outlived the bisection"
            time.sleep(0.05)


# ---- refusals ---------------------------------------------------------------------------------


def test_refuses_outside_a_git_repository(tmp_path, env):
    folder = tmp_path / "plain"
    folder.mkdir()
    with pytest.raises(UserError, match="is not inside a git repository") as e:
        bisect_metric(folder, "HEAD~1", "HEAD", "val_loss", 5.0, [])
    assert "\n" not in str(e.value)


def test_refuses_a_dirty_working_tree(tmp_path, env):
    repo = tmp_path / "repo"
    fake_repo(repo, ["1.0", "3.0"])
    (repo / "src" / "nanolm" / "value.txt").write_text("2.0\n")
    before = repo_state(repo)
    with pytest.raises(
        UserError,
        match=r"uncommitted changes .*src/nanolm/value\.txt.*bisect checks out commits.*"
        r"commit or stash",
    ) as e:
        bisect_metric(repo, "HEAD~1", "HEAD", "val_loss", 2.5, [])
    assert "\n" not in str(e.value)
    assert repo_state(repo) == before


@pytest.mark.parametrize(
    ("good", "bad", "words"),
    [
        ("nosuchrev", "HEAD", "--good 'nosuchrev': no such commit"),
        ("HEAD~1", "v9.9", "--bad 'v9.9': no such commit"),
        ("HEAD~5", "HEAD", "--good 'HEAD~5': no such commit"),
        ("HEAD", "HEAD~1", "--good HEAD is not an ancestor of --bad HEAD~1"),
        ("main", "HEAD", "are the same commit"),
    ],
)
def test_refuses_bad_revisions(tmp_path, env, good, bad, words):
    repo = tmp_path / "repo"
    fake_repo(repo, ["1.0", "3.0"])
    with pytest.raises(UserError) as e:
        bisect_metric(repo, good, bad, "val_loss", 2.0, [])
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"metric": "val_los"}, "--metric 'val_los' is not a training result; use one of val_loss"),
        ({"threshold": math.nan}, "--threshold must be a finite number"),
        ({"noise": -1.0}, "--noise must be >= 0"),
        ({"overrides": ["lrr=1"]}, "unknown key 'lrr'"),
    ],
)
def test_refuses_bad_arguments(tmp_path, env, kwargs, words):
    args = {"metric": "val_loss", "threshold": 2.0, "overrides": [], **kwargs}
    with pytest.raises(UserError) as e:
        bisect_metric(tmp_path, "HEAD~1", "HEAD", **args)
    assert words in str(e.value)


def test_judge():
    assert judge(1.0, 2.0) == ("good", "metric 1 <= threshold 2")
    assert judge(3.0, 2.0, metric="val_loss") == ("bad", "val_loss 3 > threshold 2")
    assert judge(3.0, 2.0, higher_is_better=True)[0] == "good"
    assert judge(1.0, 2.0, higher_is_better=True)[0] == "bad"
    assert judge(2.05, 2.0, noise=0.1)[0] == "skip"
    assert judge(2.0, 2.0)[0] == "good"
    assert judge(math.nan, 2.0)[0] == "bad"
    assert judge(math.nan, 2.0, higher_is_better=True)[0] == "bad"


@pytest.mark.parametrize(
    ("setup", "args", "words"),
    [
        ("plain", ["--good", "HEAD~1", "--bad", "HEAD"], "is not inside a git repository"),
        ("dirty", ["--good", "HEAD~1", "--bad", "HEAD"], "uncommitted changes"),
        ("clean", ["--good", "nosuchrev", "--bad", "HEAD"], "--good 'nosuchrev': no such commit"),
    ],
)
def test_command_line_refusals_are_one_line_and_exit_code_2(tmp_path, env, setup, args, words):
    repo = tmp_path / "repo"
    if setup == "plain":
        repo.mkdir()
    else:
        fake_repo(repo, ["1.0", "3.0"])
    if setup == "dirty":
        (repo / "src" / "nanolm" / "value.txt").write_text("2.0\n")
    before = repo_state(repo) if setup != "plain" else None
    out = subprocess.run(
        [sys.executable, "-m", "nanolm", "bisect", *args, "--threshold", "2"], cwd=repo, capture_output=True, text=True
    )
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert len(out.stderr.strip().splitlines()) == 1 and words in out.stderr and "Traceback" not in out.stderr
    if before is not None:
        assert repo_state(repo) == before


def test_relative_data_paths_are_made_absolute_for_the_scratch_runs(tmp_path, monkeypatch):
    """Each commit trains in its own scratch folder, so `--set data=../corpus.txt` must mean the
    user's ../corpus.txt, not the scratch folder's."""
    from nanolm.repro.bisect import absolute_paths

    monkeypatch.chdir(tmp_path)
    assert absolute_paths(["data=../corpus.txt", "lr=1e-3", "data=/abs/x.txt", "data=none"]) == [
        f"data={tmp_path.parent.resolve() / 'corpus.txt'}",
        "lr=1e-3",
        "data=/abs/x.txt",
        "data=none",
    ]
