"""The built-in sections of a run's page; importing a module registers its sections (nanolm.report.registry).
A new tool adds its section as one more function with @register in a module imported here."""

from . import alignment, interp, profile, research, results, run  # noqa: F401
