"""One self-contained HTML page per run (``nanolm report RUN``), and two runs side by side
(``nanolm report compare A B``).

The library returns data: ``build_report(run_dir) -> Report`` (sections of tables with the raw numbers,
figures, lines; ``Report.to_dict()`` is ``--json``), ``render_html(report) -> str``, and
``write_report(run_dir, out=None, on_problem=None) -> Path`` (build, render, write atomically), which a
long-running command can call at its end. ``compare_runs(a, b) -> Report`` builds the comparison.

The page's sections are one list, nanolm.report.sections.SECTIONS: one function per section, reading what the
tools saved in the run folder (each tool saves its --json result there every time it runs, through
nanolm.cli.output.save_run_result, in the folder nanolm.runs.artifacts names for it); a section with no data
is left out, an artifact that cannot be read is named on the page and the rest is written. What the
sections read, and which command writes it:
  manifest.json, metrics.jsonl                   the run, its loss curves (nanolm train)
  profiles/<time>.json, <time>-trace.json        nanolm profile --run RUN
  lens/show.json, lens/eval.json, tuned_lens/    nanolm lens RUN, lens eval RUN, lens train RUN
  probes/FEATURE.json, figures/probe-*.png       nanolm probe RUN (with --intervene: the intervention too)
  sae/NAME/cfg.json, eval.json; sae/sweep-*.json nanolm sae train, sae eval, sae sweep
  steering/DIRECTION.json, figures/steer-*.png   nanolm steer sweep RUN
  sycophancy/NAME.jsonl, NAME.json               nanolm sycophancy RUN (records; summary: knows vs says, steering)
  feedback/*.jsonl, feedback/*.json              nanolm feedback pairs / label (pairs, labels; the judge's biases)
  reward_models/, best_of_n/                     nanolm feedback reward-model / best-of-n
  (the seed group in config.group)               nanolm seeds: the group's runs beside this one
Those commands take --report to write the run's page when they finish (nanolm.cli.output.report_option).
"""

from .build import build_report, check_page_path, check_run_folder, write_html, write_report
from .compare import compare_runs
from .html import render_html
from .model import Column, Figure, Link, Measure, Report, Section, Table
from .registry import RunFiles, SectionSpec
from .sections import SECTIONS

__all__ = [
    "build_report",
    "check_page_path",
    "check_run_folder",
    "compare_runs",
    "render_html",
    "write_html",
    "write_report",
    "SECTIONS",
    "SectionSpec",
    "RunFiles",
    "Report",
    "Section",
    "Table",
    "Column",
    "Figure",
    "Link",
    "Measure",
]
