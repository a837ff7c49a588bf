"""The package's structure: every module imports on its own, and the layer contract (import-linter,
configured in pyproject.toml) is live: it passes on the tree and fails on a planted upward import."""

from __future__ import annotations

import os
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import nanolm

ROOT = Path(__file__).resolve().parents[1]


def all_modules() -> list[str]:
    """Every module of the package but ``nanolm.__main__``, which runs the CLI when imported."""
    return sorted(m.name for m in pkgutil.walk_packages(nanolm.__path__, prefix="nanolm.") if m.name != "nanolm.__main__")


def test_every_module_imports_on_its_own():
    """Each module is imported first, with no other nanolm module loaded before it, so an import cycle
    that only bites one entry point (``import nanolm.cli.interp`` once failed this way) shows up."""
    modules = all_modules()
    assert len(modules) > 40 and "nanolm.cli.interp" in modules and "nanolm.cli.output" in modules
    code = (
        "import importlib, sys, traceback\n"
        "failed = []\n"
        f"for name in {modules!r}:\n"
        "    for loaded in [m for m in sys.modules if m == 'nanolm' or m.startswith('nanolm.')]:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as e:\n"
        "        failed.append(f'{name}: {type(e).__name__}: {e}')\n"
        "print('\\n'.join(failed))\n"
        "sys.exit(1 if failed else 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def lint_imports(src_root: Path, cwd: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe is not None, "import-linter is not installed: it is in the dev extra, which make test installs"
    env = {**os.environ, "PYTHONPATH": str(src_root)}
    return subprocess.run([exe, "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_layer_contract_holds_and_catches_an_upward_import(tmp_path):
    shutil.copytree(ROOT / "src" / "nanolm", tmp_path / "src" / "nanolm", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    clean = lint_imports(tmp_path / "src", tmp_path)
    assert clean.returncode == 0 and "0 broken" in clean.stdout, clean.stdout + clean.stderr

    model = tmp_path / "src" / "nanolm" / "model.py"  # core reaching up into the CLI
    model.write_text(model.read_text() + "\nfrom .cli import output  # noqa\n")
    broken = lint_imports(tmp_path / "src", tmp_path)
    assert broken.returncode != 0 and "nanolm.model -> nanolm.cli.output" in broken.stdout, broken.stdout

    model.write_text(model.read_text().replace("from .cli import output  # noqa\n", ""))
    interp = tmp_path / "src" / "nanolm" / "interp" / "lens.py"  # one domain package using another's internals
    interp.write_text(interp.read_text() + "\nfrom ..formal import dfa  # noqa\n")
    crossed = lint_imports(tmp_path / "src", tmp_path)
    assert crossed.returncode != 0 and "nanolm.interp.lens -> nanolm.formal.dfa" in crossed.stdout, crossed.stdout
