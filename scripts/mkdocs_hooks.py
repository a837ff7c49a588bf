"""MkDocs hooks (mkdocs.yml's `hooks:`): the home page from README.md and the configuration reference from
`TrainConfig`, both written at build time, and click's preformatted help paragraphs kept preformatted in the
command-line reference.

The home page (`index.md`) is README.md with its links into `docs/` made relative to the site, so the README and
the site's first page are one text, and the strict build checks the README's links and anchors too.

`reference/config.md` is made from the dataclass in src/nanolm/config.py, read as source (nothing imported): each
field's name, type, default and docstring, a comment line above a field starting a section. The page exists only
in the build, so nothing generated is committed and it cannot go stale. A field without a docstring stops the
build, naming it.

mkdocs-click writes a command's help as Markdown as it stands; a paragraph that click prints as written (one that
starts with a `\\b` line: usage lines, aligned columns) would be run together into prose, and its `[--json]` read
as a link. `help_markdown` turns each such paragraph into a fenced text block, and stops at click's `\\f`."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG_SOURCE = ROOT / "src" / "nanolm" / "config.py"
README = ROOT / "README.md"
PAGE = "reference/config.md"
HOME = "index.md"


@dataclass(frozen=True)
class ConfigKey:
    name: str
    annotation: str  # as written in the source (a Literal of words shown as str: show_annotation)
    default: object  # the literal value
    doc: str
    section: str


def config_keys(source: str, class_name: str = "TrainConfig") -> list[ConfigKey]:
    """The dataclass's fields in order, with their docstrings and sections; ValueError names a field without one."""
    tree = ast.parse(source)
    lines = source.splitlines()
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
    if cls is None:
        raise ValueError(f"no class {class_name} in the configuration source")
    keys: list[ConfigKey] = []
    section = "run"
    for i, node in enumerate(cls.body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above = lines[node.lineno - 2].strip()  # the line just above the field (lineno is 1-based)
        if above.startswith("#"):
            section = above.lstrip("# ").strip()
        after = cls.body[i + 1] if i + 1 < len(cls.body) else None
        if not (isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str) and after.value.value.strip()):
            raise ValueError(f"{class_name}.{node.target.id} has no docstring: write what the key means in a string "
                             f"on the line below it")
        default = ast.literal_eval(node.value) if node.value is not None else None
        doc = " ".join(after.value.value.split())
        keys.append(ConfigKey(node.target.id, show_annotation(node.annotation), default, doc, section))
    return keys


class _LiteralAsType(ast.NodeTransformer):
    """``Literal["auto", "bf16"]`` -> ``str``: the type a TOML file or ``--set`` writes; the key's docstring names
    the words it takes."""

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        if isinstance(node.value, ast.Name) and node.value.id == "Literal":
            values = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            kinds = dict.fromkeys(type(ast.literal_eval(v)).__name__ for v in values)
            return ast.Name(" | ".join(kinds))
        return self.generic_visit(node)


def show_annotation(annotation: ast.expr) -> str:
    """A field's annotation as the page shows it: as written in the source, a Literal as the type of its words."""
    return ast.unparse(_LiteralAsType().visit(annotation))


def show_default(value: object) -> str:
    """A default as a TOML file or `--set` would spell it (`none` for None)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return value
    return repr(value)


def config_reference(source: str) -> str:
    """The Markdown page: how keys are set, then one table per section."""
    out = [
        "# Configuration reference",
        "",
        "Every key of a training run: `--set KEY=VALUE` (repeatable), a TOML file of keys (`--config FILE`, then",
        "`--set` on top), or `make_config(overrides=[\"KEY=VALUE\"])` in Python. Every run records all of them in its",
        "manifest. Unknown keys and wrong types are one-line errors. This page is written from `TrainConfig`",
        "(`src/nanolm/config.py`) each time the documentation is built.",
    ]
    section = None
    for key in config_keys(source):
        if key.section != section:
            section = key.section
            title, _, about = section.partition(":")
            out += ["", f"## {title.strip().capitalize()}", ""]
            if about.strip():
                out += [about.strip()[0].upper() + about.strip()[1:] + ".", ""]
            out += ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
        annotation = key.annotation.replace(" | ", " or ")
        out.append(f"| `{key.name}` | `{annotation}` | `{show_default(key.default)}` | {key.doc} |")
    return "\n".join(out) + "\n"


def home_page(readme: str) -> str:
    """README.md as the site's first page: links to `docs/PAGE` become `PAGE`."""
    return readme.replace("](docs/", "](")


def help_markdown(help_text: str) -> Iterator[str]:
    """A click help text as Markdown lines: `\\b` paragraphs fenced as text, the rest as it is, nothing after `\\f`."""
    text = inspect.cleandoc(help_text).split("\f", 1)[0]
    for paragraph in text.split("\n\n"):
        lines = paragraph.splitlines()
        if lines and lines[0].strip() == "\b":
            yield from ["```text", *lines[1:], "```", ""]
        else:
            yield from [*lines, ""]


def _command_description(ctx, remove_ascii_art: bool = False) -> Iterator[str]:  # noqa: ANN001 (a click.Context)
    help_text = ctx.command.help or ctx.command.short_help
    if help_text:
        yield from help_markdown(help_text)


# ---- the hooks ------------------------------------------------------------------------------------------------

def on_startup(command, dirty):  # noqa: ANN001, ANN201
    import mkdocs_click._docs  # mkdocs-click 0.8-0.9 writes a command's description with this function

    if not callable(getattr(mkdocs_click._docs, "_make_description", None)):
        raise RuntimeError("mkdocs-click no longer has _docs._make_description: update scripts/mkdocs_hooks.py")
    mkdocs_click._docs._make_description = _command_description


def on_files(files, config):  # noqa: ANN001, ANN201 (MkDocs' own types, imported only inside MkDocs)
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=config_reference(CONFIG_SOURCE.read_text(encoding="utf-8"))))
    files.append(File.generated(config, HOME, content=home_page(README.read_text(encoding="utf-8"))))
    return files


def on_serve(server, config, builder):  # noqa: ANN001, ANN201
    server.watch(str(CONFIG_SOURCE))  # `make docs-serve` rebuilds the pages when their sources change
    server.watch(str(README))
    return server
