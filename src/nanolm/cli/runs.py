"""``nanolm runs`` and ``nanolm runs show``: the run store as a table or a manifest."""

from __future__ import annotations

import click

from .output import console, emit, json_option, print_json, runs_dir_option


@click.group(invoke_without_command=True)
@runs_dir_option
@json_option
@click.pass_context
def runs(ctx: click.Context, runs_dir: str, json_out: bool) -> None:
    """List runs: name, status, steps, val loss, data version, commit."""
    if ctx.invoked_subcommand is not None:
        return
    from ..runs import list_runs

    found = list_runs(runs_dir)
    problems = [f"{r.path.name}: {r.problem}" for r in found if r.problem]
    emit(found, lambda rows: _print_runs(rows, runs_dir), json_out, warnings=problems)


def _print_runs(found: list, runs_dir: str) -> None:
    """One row per run, in 80 columns: the folder name (what other commands take), status, steps done of
    the run's target, the final val loss and the commit; the data column only when runs differ in it."""
    from rich import box
    from rich.table import Table

    if not found:
        console().print(f"no runs in {runs_dir}/ yet; start one with: nanolm train")
        return
    show_data = len({r.data_version for r in found if r.data_version}) > 1
    table = Table(title=f"runs in {runs_dir}/", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("run", overflow="fold")  # only a name too long for the line folds; the rest never wraps
    for col in ("status", "step", "val loss", *(("data",) if show_data else ()), "commit"):
        table.add_column(col, justify="right" if col in ("step", "val loss") else "left", no_wrap=True)
    for r in found:
        commit = "-" if r.commit is None else r.commit[:7] + ("+" if r.dirty else "")
        step = f"{r.step if r.step is not None else '-'}/{r.steps if r.steps is not None else '-'}"
        data = (_short_data(r.data_version),) if show_data else ()
        table.add_row(r.path.name, r.status, step, "-" if r.val_loss is None else f"{r.val_loss:.4f}", *data, commit)
    console().print(table)
    if any(r.dirty for r in found):
        console().print("commit+: uncommitted changes (the manifest keeps a hash of the diff)")


def _short_data(version: str | None) -> str:
    """'nanolm-corpus-v1:seed=0:lines=40000:val=0.1' -> 'corpus s0 40000'; 'file:a.txt:val=0.1' -> 'a.txt'."""
    if not version:
        return "-"
    parts = dict(p.split("=", 1) for p in version.split(":")[1:] if "=" in p)
    if version.startswith("file:"):
        return version.split(":")[1]
    return f"corpus s{parts.get('seed', '?')} {parts.get('lines', '?')}"


@runs.command("show")
@click.argument("run")
@runs_dir_option
def runs_show(run: str, runs_dir: str) -> None:
    """Print one run's manifest (JSON)."""
    from ..runs import read_manifest, resolve_run

    # Not emit(): JSON is this command's only form (no --json flag, no table).
    print_json(read_manifest(resolve_run(run, runs_dir)).to_dict())
