"""Alignment measurements built on the interpretability tools: sycophancy (does the model agree with the
user against the facts, and did it know better?) and AI feedback with measured judge biases.

Sits above the domain packages (it uses interp's probes and views); nothing below imports it."""
