"""The documentation site: `mkdocs build --strict` passes on the pages as they are and fails, naming the fault, on a
dead link, a page missing from the nav or an API path that does not exist; the configuration reference it writes
from `TrainConfig` is the config; click's preformatted help stays preformatted in the command-line reference."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nanolm.config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


def load_hooks():
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


HOOKS = load_hooks()
CONFIG_SOURCE = (ROOT / "src" / "nanolm" / "config.py").read_text(encoding="utf-8")


def test_the_configuration_reference_is_the_config():
    keys = HOOKS.config_keys(CONFIG_SOURCE)
    fields = dataclasses.fields(TrainConfig)
    assert [k.name for k in keys] == [f.name for f in fields]
    for key, field in zip(keys, fields):
        assert key.default == field.default and type(key.default) is type(field.default), key.name
        assert len(key.doc) > 5, key.name
    page = HOOKS.config_reference(CONFIG_SOURCE)
    for key in keys:
        assert f"| `{key.name}` |" in page
    assert "| `lr` | `float` | `0.003` |" in page and "| `data` | `str or None` | `none` |" in page
    assert "| `deterministic` | `bool or str` | `false` |" in page
    assert {"## Data", "## Model", "## Optimization", "## Hardware"} <= set(page.splitlines())


def test_a_config_key_without_a_docstring_stops_the_page():
    source = CONFIG_SOURCE.replace('    """the corpus generator\'s seed"""\n', "", 1)
    assert source != CONFIG_SOURCE
    with pytest.raises(ValueError, match="TrainConfig.corpus_seed has no docstring"):
        HOOKS.config_reference(source)


def test_click_preformatted_help_is_fenced():
    lines = list(HOOKS.help_markdown("Say it.\n\n\b\nnanolm x [--json]    one\nnanolm y        two\n\nProse.\f\nhidden"))
    assert lines == ["Say it.", "", "```text", "nanolm x [--json]    one", "nanolm y        two", "```", "", "Prose.", ""]


# ---- building the site -------------------------------------------------------------------------------------------


def mkdocs_or_skip() -> None:
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python", "mkdocs_click"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed: the docs extra (pip install -e '.[docs]'; `make test` installs it)")


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"), "-d", str(site)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_the_site_builds_strict(tmp_path):
    mkdocs_or_skip()
    out = build(ROOT, tmp_path / "site")
    assert out.returncode == 0, out.stderr[-3000:]
    site = tmp_path / "site"
    config_page = (site / "reference" / "config.html").read_text(encoding="utf-8")
    for field in dataclasses.fields(TrainConfig):
        assert f"<code>{field.name}</code>" in config_page, field.name
    cli_page = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    from nanolm.cli import app

    for name in app.list_commands(None):
        assert f"nanolm {name}" in cli_page, name
    assert "nanolm profile compare" in cli_page and "nanolm profile analyze" in cli_page
    assert "train_sae" in (site / "reference" / "api" / "sae.html").read_text(encoding="utf-8")
    home = (site / "index.html").read_text(encoding="utf-8")
    assert 'href="profiling.html#anyones-script"' in home  # the README, its links made the site's


def copy_of_the_site(tmp_path: Path) -> Path:
    """mkdocs.yml, docs/, README.md (the home page) and the hook copied (src linked), to plant a fault in."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", root / "docs")
    shutil.copy(ROOT / "README.md", root)
    (root / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "mkdocs_hooks.py", root / "scripts")
    shutil.copy(ROOT / "mkdocs.yml", root)
    (root / "src").symlink_to(ROOT / "src")
    return root


@pytest.mark.parametrize(
    "fault", ["dead link", "dead anchor", "dead anchor in the README", "page not in the nav", "API path that does not exist"]
)
def test_a_fault_fails_the_build_naming_it(tmp_path, fault):
    mkdocs_or_skip()
    root = copy_of_the_site(tmp_path)
    if fault == "dead link":
        with open(root / "docs" / "steering.md", "a", encoding="utf-8") as f:
            f.write("\nSee [the old page](no-such-page.md).\n")
        named = ["steering.md", "no-such-page.md"]
    elif fault == "dead anchor":
        with open(root / "docs" / "steering.md", "a", encoding="utf-8") as f:
            f.write("\nSee [the profiler](profiling.md#no-such-section).\n")
        named = ["steering.md", "no-such-section"]
    elif fault == "dead anchor in the README":  # the home page is the README, so its links are checked too
        readme = (root / "README.md").read_text(encoding="utf-8")
        assert "(docs/profiling.md#anyones-script)" in readme
        (root / "README.md").write_text(readme.replace("#anyones-script", "#anyone-s-script"), encoding="utf-8")
        named = ["index.md", "anyone-s-script"]
    elif fault == "page not in the nav":
        (root / "docs" / "orphan.md").write_text("# Orphan\n", encoding="utf-8")
        named = ["orphan.md"]
    else:
        with open(root / "docs" / "reference" / "api" / "training.md", "a", encoding="utf-8") as f:
            f.write("\n::: nanolm.no_such_module\n")
        named = ["nanolm.no_such_module"]
    out = build(root, tmp_path / "site")
    assert out.returncode != 0, f"{fault}: the build passed"
    for name in named:
        assert name in out.stderr, (fault, name, out.stderr[-3000:])
