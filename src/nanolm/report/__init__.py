"""One self-contained HTML page per run (``nanolm report RUN``), and two runs side by side
(``nanolm report compare A B``).

The library returns data: ``build_report(run_dir) -> Report`` (sections of tables with the raw numbers,
figures, lines; ``Report.to_dict()`` is ``--json``), ``render_html(report) -> str``, and
``write_report(run_dir, out=None, on_problem=None) -> Path`` (build, render, write atomically), which a
long-running command can call at its end. ``compare_runs(a, b) -> Report`` builds the comparison.

Sections are a registry (nanolm.report.registry): one function per section, reading what the tools saved
in the run folder; a section with no data is left out, an artifact that cannot be read is named on the
page and the rest is written. What each section reads:
  manifest.json, metrics.jsonl                   the run, its loss curves
  profiles/*.json (+ the trace beside it)        nanolm profile --json RUN/profiles/NAME.json --trace ...
  lens/*.json, tuned_lens/, figures/lens*.png    nanolm lens (eval) RUN --json > RUN/lens/NAME.json
  probes/*.json, figures/probe-*.png             nanolm probe RUN --json > RUN/probes/FEATURE.json
  sae/*/cfg.json, sae/*/eval.json, sae/sweep-*   nanolm sae train / eval --json / sweep --json
  steering/*.json, figures/steer-sweep-*.png     nanolm steer sweep RUN --json > RUN/steering/NAME.json
  sycophancy/*.jsonl                             nanolm sycophancy RUN (its per-question records)
  feedback/, reward_models/, best_of_n/          nanolm feedback pairs / label / reward-model / best-of-n
  (the seed group in config.group)               nanolm seeds: the group's runs beside this one
"""

from .build import build_report, check_page_path, check_run_folder, write_html, write_report
from .compare import compare_runs
from .html import render_html
from .model import Column, Figure, Link, Measure, Report, Section, Table
from .registry import RunFiles, register

__all__ = ["build_report", "check_page_path", "check_run_folder", "compare_runs", "render_html", "write_html",
           "write_report", "register", "RunFiles", "Report", "Section", "Table", "Column", "Figure", "Link", "Measure"]
