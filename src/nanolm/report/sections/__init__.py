"""The sections of a run's page, in page order: SECTIONS is the one list (build_report reads it; a notebook can
pass its own, e.g. ``build_report(run, sections=(*SECTIONS, SectionSpec("mine", "My tool", my_section)))``).
Each section is one function ``build(run: RunFiles, section: Section)`` in the module of its part of the
toolkit, which adds nothing when the run has none of its results."""

from ..registry import SectionSpec
from . import alignment, interp, profile, research, results, run

SECTIONS: tuple[SectionSpec, ...] = (
    SectionSpec("results", "Results", results.results_section),
    SectionSpec("manifest", "Run", run.manifest_section),
    SectionSpec("curves", "Evaluations", run.curves_section),
    SectionSpec("profile", "Profile", profile.profile_section),
    SectionSpec("lens", "Logit lens and tuned lens", interp.lens_section),
    SectionSpec("probe", "Linear probes", interp.probe_section),
    SectionSpec("intervention", "Interventions", interp.intervention_section),
    SectionSpec("sae", "Sparse autoencoders", interp.sae_section),
    SectionSpec("steering", "Steering", interp.steering_section),
    SectionSpec("claims", "Claims checked by measurement", research.claims_section),
    SectionSpec("sycophancy", "Sycophancy", alignment.sycophancy_section),
    SectionSpec("feedback", "AI feedback", alignment.feedback_section),
    SectionSpec("seeds", "Seed group", run.seeds_section),
    SectionSpec("provenance", "Config, environment, code and data", run.provenance_section),
)
