"""Runs: the record of each training run (``store``: ``runs/<timestamp>-<name>/manifest.json`` and
``metrics.jsonl``) and the one home of everything the tools make from a run (``artifacts``: one
`Artifact` per kind of result, ``RUN/<folder>/``)."""

from .artifacts import (
    ARTIFACTS,
    BEST_OF_N,
    CLAIMS,
    FEEDBACK,
    FIGURES,
    LENS,
    PROBES,
    PROFILES,
    REWARD_MODELS,
    SAE,
    STEERING,
    SYCOPHANCY,
    TUNED_LENS,
    Artifact,
    artifact_dir,
    is_hf_model,
    is_run,
)
from .store import (
    MANIFEST,
    MANIFEST_SCHEMA,
    MAX_FOLDER_NAME,
    METRICS,
    MODEL_FIELDS,
    Manifest,
    MetricsLog,
    RunFinal,
    RunStatus,
    RunSummary,
    command_line,
    effective_status,
    environment_info,
    find_launched_run,
    git_info,
    list_runs,
    new_run_dir,
    owner_info,
    process_gone,
    read_manifest,
    read_metrics,
    resolve_run,
    same_fingerprint,
    weights_fingerprint,
    write_manifest,
)

__all__ = [
    "ARTIFACTS", "BEST_OF_N", "CLAIMS", "FEEDBACK", "FIGURES", "LENS", "PROBES", "PROFILES", "REWARD_MODELS", "SAE",
    "STEERING", "SYCOPHANCY", "TUNED_LENS", "Artifact", "artifact_dir", "is_hf_model", "is_run",
    "MANIFEST", "MANIFEST_SCHEMA", "MAX_FOLDER_NAME", "METRICS", "MODEL_FIELDS", "Manifest", "MetricsLog", "RunFinal",
    "RunStatus", "RunSummary", "command_line", "effective_status", "environment_info", "find_launched_run", "git_info",
    "list_runs", "new_run_dir", "owner_info", "process_gone", "read_manifest", "read_metrics", "resolve_run",
    "same_fingerprint", "weights_fingerprint", "write_manifest",
]
