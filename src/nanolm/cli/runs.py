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

    emit(list_runs(runs_dir), lambda found: _print_runs(found, runs_dir), json_out)


def _print_runs(found: list, runs_dir: str) -> None:
    from rich.table import Table

    if not found:
        console().print(f"no runs in {runs_dir}/ yet; start one with: nanolm train")
        return
    table = Table(title=f"runs in {runs_dir}/")
    for col in ("run", "status", "step", "val loss", "data", "commit"):
        table.add_column(col, overflow="fold")
    for r in found:
        commit = "-" if r.commit is None else r.commit[:10] + ("+dirty" if r.dirty else "")
        table.add_row(r.path.name, r.status, f"{r.step if r.step is not None else '-'}/{r.steps}",
                      "-" if r.val_loss is None else f"{r.val_loss:.4f}", r.data_version or "-", commit)
    console().print(table)


@runs.command("show")
@click.argument("run")
@runs_dir_option
def runs_show(run: str, runs_dir: str) -> None:
    """Print one run's manifest (JSON)."""
    from ..runs import read_manifest, resolve_run

    # Not emit(): JSON is this command's only form (no --json flag, no table).
    print_json(read_manifest(resolve_run(run, runs_dir)).to_dict())


