"""Kill criteria: an experiment file runs what is missing, reuses finished runs, and gives KEEP or KILL."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import TINY

COMMON = "\n".join(f"{k} = {v}" for k, v in (kv.split("=") for kv in TINY) if k != "lr")


def write_experiment(tmp_path, candidate_lr: str) -> str:
    path = tmp_path / "exp.toml"
    path.write_text(f"""idea = "higher lr"
metric = "val_loss"
seeds = 3
rule = "close if the effect is smaller than the noise at two scales"
kill_if_no_effect_at = 2
[common]
{COMMON}
steps = 40
eval_every = 40
ckpt_every = 40
runs_dir = "{tmp_path / "runs"}"
[baseline]
lr = 1e-3
[candidate]
lr = {candidate_lr}
[[scales]]
name = "d32"
d_model = 32
[[scales]]
name = "d48"
d_model = 48
""")
    return str(path)


def nanolm(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "nanolm", *args], cwd=cwd, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}
    )


@pytest.mark.slow  # over 10 s: make test-slow (CI runs both)
def test_experiment_keep_then_kill_reusing_runs(tmp_path, cli):
    keep = write_experiment(tmp_path, "1e-2")
    out = nanolm("experiment", "run", keep, "--jobs", "2", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "12 runs trained, 0 reused" in out.stdout
    verdict = json.loads(cli("experiment", "verdict", keep, "--json", cwd=tmp_path).stdout)
    assert verdict["decision"] == "KEEP" and [s["verdict"] for s in verdict["scales"]] == ["better beyond noise"] * 2
    again = cli("experiment", "run", keep, cwd=tmp_path)
    assert "0 runs trained, 12 reused" in again.stdout
    manifests = [json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*/manifest.json")]
    assert {m["config"]["experiment"] for m in manifests} == {"higher-lr"}
    # Edit the file so the candidate is the baseline: only the candidate's runs are new, and it is killed.
    kill = write_experiment(tmp_path, "1e-3")
    assert "6 runs trained, 6 reused" in nanolm("experiment", "run", kill, "--jobs", "2", cwd=tmp_path).stdout
    verdict = json.loads(cli("experiment", "verdict", kill, "--json", cwd=tmp_path).stdout)
    assert verdict["decision"] == "KILL" and "at 2 of 2 scales" in verdict["reason"]


def test_experiment_file_errors(tmp_path, cli):
    bad = tmp_path / "bad.toml"
    bad.write_text('idea = "x"\nbaseline = {}\ncandidate = {}\nseeds = 2\n')
    out = nanolm("experiment", "run", str(bad), cwd=tmp_path)
    assert out.returncode == 2 and "at least 3" in out.stderr
    bad.write_text('idea = "x"\nbaseline = {lr = 0}\ncandidate = {}\n')
    out = cli("experiment", "run", str(bad), cwd=tmp_path)
    assert out.returncode == 2 and "lr must be > 0" in out.stderr
    bad.write_text('idea = "x"\nbaseline = {}\ncandidate = {}\nkill_rule = 1\n')
    out = cli("experiment", "verdict", str(bad), cwd=tmp_path)
    assert out.returncode == 2 and "unknown key 'kill_rule'" in out.stderr


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("seeds = 2.5", "seeds = 2.5 should be a number of seeds (3) or a list of seeds"),
        ("seeds = [1, 1, 2]", "should be distinct whole numbers"),
        ("scales = [1]", "scales entry #1 is 1; each is a [[scales]] table"),
        ("scales = 1", "scales = 1 should be an array of tables"),
        ('higher_is_better = "false"', "higher_is_better = 'false' should be true or false"),
        ("kill_if_no_effect_at = 3", "kill_if_no_effect_at = 3 should be between 1 and the number of scales (1)"),
        ("metric = 1", "metric = 1 should be a metric name"),
        ('[[scales]]\nname = "a"\n[[scales]]\nname = "a"', "two scales share the name 'a'"),
        ("[common]\nseed = 42", "[common] sets 'seed', which the experiment sets for each run"),
        ('[[scales]]\nname = "a"\ngroup = "g"', "[[scales]] 'a' sets 'group'"),
        ('metric = "val_los"', "metric = 'val_los' is not a metric runs record; choose one of val_loss"),
    ],
)
def test_wrongly_typed_experiment_keys_are_one_line_errors(tmp_path, cli, text, words):
    bad = tmp_path / "bad.toml"
    bad.write_text(f'idea = "x"\nbaseline = {{}}\ncandidate = {{}}\n{text}\n')
    out = cli("experiment", "run", str(bad), cwd=tmp_path)
    assert out.returncode == 2 and words in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_verdict_before_the_runs_says_to_run_the_experiment(tmp_path, cli):
    exp = tmp_path / "exp.toml"
    exp.write_text('idea = "x"\nbaseline = {}\ncandidate = {lr = 1e-2}\n')
    out = cli("experiment", "verdict", str(exp), cwd=tmp_path)
    assert out.returncode == 2 and f"train them first: nanolm experiment run {exp}" in out.stderr


def test_a_candidate_that_diverges_on_a_seed_is_worse_and_not_retrained(tmp_path, cli):
    """Runs faked from the experiment's own group names: the baseline finished on 3 seeds, the
    candidate diverged on one of its 3. `run` must not train anything; `verdict` kills it."""
    from nanolm.config import make_config
    from nanolm.repro.experiment import load_experiment

    path = write_experiment(tmp_path, "1e-2")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:  # one scale without an effect is enough to kill
        f.write(text.replace("kill_if_no_effect_at = 2", "kill_if_no_effect_at = 1"))
    exp = load_experiment(path)
    for scale_name, scale in exp.scales:
        for arm in ("baseline", "candidate"):
            cfg = make_config(overrides=exp.overrides(scale, arm)).to_dict()
            for seed in exp.seeds:
                run = tmp_path / "runs" / f"20260101-{scale_name}-{arm}-{seed}"
                run.mkdir(parents=True)
                status = "diverged" if (arm, seed, scale_name) == ("candidate", 2, "d48") else "finished"
                final = (
                    {"step": 7, "diverged_at": 7}
                    if status == "diverged"
                    else {"step": 40, "val_loss": 3.0 + seed / 100 - (arm == "candidate") * 0.5, "train_loss": 3.0}
                )
                manifest = {
                    "status": status,
                    "config": {**cfg, "group": exp.group(scale_name, arm), "seed": seed},
                    "data": {"version": "nanolm-corpus-v1:seed=0", "sha256": None},
                    "final": final,
                }
                (run / "manifest.json").write_text(json.dumps(manifest))
    again = cli("experiment", "run", path, "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["ran"] == [] and len(json.loads(again.stdout)["reused"]) == 12
    out = cli("experiment", "verdict", path, "--json", cwd=tmp_path)
    verdict = json.loads(out.stdout)
    assert [s["verdict"] for s in verdict["scales"]] == ["better beyond noise", "worse: diverged"]
    assert verdict["scales"][1]["mean_candidate"] is None and "seed(s) 2" in verdict["scales"][1]["reason"]
    assert verdict["decision"] == "KILL"
