"""Expressivity: finite automata, their exact compilation into ReLU-RNNs, Dyck languages and a
depth-generalization experiment, and the finite-precision bound on trackable depth.

Names are loaded on first use, so ``nanolm --help`` (whose commands live in ``nanolm.cli.formal``)
does not pay for numpy or torch."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "dfa": [
        "DFA",
        "UnreachableStatesWarning",
        "contains",
        "divisible_by",
        "load_dfa",
        "minimize_with_blocks",
        "parity",
        "random_dfa",
        "save_dfa",
    ],
    "rnn": ["CompiledDFA", "RNNSizes", "VerifyReport", "compile_dfa_to_relu_rnn", "rnn_sizes", "verify_rnn"],
    "dyck": [
        "DepthStats",
        "depth_profile",
        "depth_stats",
        "generate",
        "max_depth",
        "next_token_sets",
        "recognize",
        "symbol_names",
        "to_string",
        "from_string",
        "vocab_size",
    ],
    "precision": ["PrecisionRow", "PrecisionTable", "finite_float_values", "max_trackable_depth", "precision_table"],
    "experiment": ["DyckExperimentConfig", "DyckExperimentResult", "experiment_figure", "run_dyck_experiment"],
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}
__all__ = sorted(_MODULE_OF)

if TYPE_CHECKING:  # for type checkers and editors; at run time __getattr__ loads them
    from .dfa import (  # noqa: F401
        DFA,
        UnreachableStatesWarning,
        contains,
        divisible_by,
        load_dfa,
        minimize_with_blocks,
        parity,
        random_dfa,
        save_dfa,
    )
    from .dyck import (  # noqa: F401
        DepthStats,
        depth_profile,
        depth_stats,
        from_string,
        generate,
        max_depth,
        next_token_sets,
        recognize,
        symbol_names,
        to_string,
        vocab_size,
    )
    from .experiment import DyckExperimentConfig, DyckExperimentResult, experiment_figure, run_dyck_experiment  # noqa: F401
    from .precision import PrecisionRow, PrecisionTable, finite_float_values, max_trackable_depth, precision_table  # noqa: F401
    from .rnn import CompiledDFA, RNNSizes, VerifyReport, compile_dfa_to_relu_rnn, rnn_sizes, verify_rnn  # noqa: F401


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        return getattr(importlib.import_module(f".{_MODULE_OF[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
