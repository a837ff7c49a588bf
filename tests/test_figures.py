"""Plotting functions return a matplotlib Figure of the numbers they are given and write nothing;
nanolm.plots.save_figure writes it as a PNG."""

from __future__ import annotations

import pytest

from nanolm.formal.experiment import DepthSummary, DyckExperimentConfig, DyckExperimentResult, experiment_figure
from nanolm.interp.probes import LayerProbe, ProbeResult, probe_figure
from nanolm.plots import save_figure


def layer(name: str, acc: float) -> LayerProbe:
    return LayerProbe(name, 60, 20, 16, 0.99, acc, (acc - 0.1, acc + 0.05), 0.5, 0.55, acc - 0.55)


def test_probe_figure_shows_each_layers_numbers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = ProbeResult(
        "m", "tense", ["past", "present"], 80, "last", "example", [layer("embed", 0.5), layer("0", 0.8), layer("1", 0.9)]
    )
    ax = probe_figure(result).axes[0]
    assert not any(tmp_path.iterdir())  # nothing written
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    assert lines["held-out accuracy"] == [0.5, 0.8, 0.9]
    assert lines["train accuracy"] == [0.99] * 3 and lines["majority class"] == [0.5] * 3
    assert lines["control task (example)"] == [0.55] * 3
    assert [t.get_text() for t in ax.get_xticklabels()] == ["embed", "0", "1"]
    assert "tense" in ax.get_title()
    assert save_figure(probe_figure(result), tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_experiment_figure_plots_the_mean_accuracy_per_model_and_depth(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    summary = [
        DepthSummary(m, d, 0.9 - 0.1 * d - off, 0.5, 1.0, 0.8 - 0.2 * d - off, 0.1, 1.0)
        for m, off in (("lstm", 0.0), ("transformer", 0.05))
        for d in (1, 2, 3)
    ]
    result = DyckExperimentResult(
        DyckExperimentConfig(k=2, train_depth=2, test_depth=3, seeds=2), None, {}, [], [], summary, [], None, 1.0
    )
    fig = experiment_figure(result)
    assert not any(tmp_path.iterdir())
    position, sequence = fig.axes[:2]
    for ax, key in ((position, "position_mean"), (sequence, "sequence_mean")):
        lines = {
            line.get_label(): list(line.get_ydata()) for line in ax.get_lines() if line.get_label() in ("lstm", "transformer")
        }
        for model in ("lstm", "transformer"):
            assert lines[model] == pytest.approx([getattr(s, key) for s in summary if s.model == model])
    assert "Dyck-2" in fig._suptitle.get_text()
    assert save_figure(fig, tmp_path / "d.png").read_bytes()[:4] == b"\x89PNG"


def test_a_file_features_plot_names_it_by_its_whole_stem_and_file(tmp_path):
    from nanolm.interp.probes import read_labelled_file

    for name, stem in (("my.csv", "my"), ("tense.v2.csv", "tense.v2"), ("data.jsonl", "data")):
        path = tmp_path / name
        if name.endswith(".csv"):
            path.write_text("text,label\nthe dog ran,past\nthe dog runs,present\n")
        else:
            path.write_text('{"text": "a", "label": "x"}\n{"text": "b", "label": "y"}\n')
        data = read_labelled_file(path)
        assert (data.name, data.source) == (stem, str(path))
        result = ProbeResult("m", data.name, data.classes, 80, "last", "example", [layer("embed", 0.5)], source=data.source)
        title = probe_figure(result).axes[0].get_title()
        assert title.startswith(f'linear probe for "{stem}" ({name}): 80 examples'), title
    builtin = ProbeResult("m", "tense", ["past", "present"], 80, "mean", "example", [layer("embed", 0.5)])
    assert probe_figure(builtin).axes[0].get_title() == "linear probe for tense: 80 examples, mean over tokens"
