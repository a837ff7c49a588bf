"""nanolm problems: what grading promises about the learner's code (nanolm.problems.sandbox), through the real
grading process. Bad input (a syntax error, a missing import, 10 MB of output, the wrong type or shape, code
that never returns, changes its working folder, deletes or writes files, reaches the network, reads the
reference solution, or starts a child process) ends as one failed check or one error line, never a
traceback of the grader, and the learner's folder is left as it was.

Files are graded several to a process (grade_files), as `nanolm problems check` grades one."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from nanolm.problems.grading import grade_files
from nanolm.problems.registry import PROBLEMS

STARS = PROBLEMS["stars_and_bars"]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def grade_sources(folder: Path, problem, sources: dict[str, str], timeout: float = 120) -> dict:
    """Write each source as NAME.py in `folder` and grade them all in one process; {name: CheckResult}."""
    folder.mkdir(exist_ok=True)
    paths = []
    for name, text in sources.items():
        (folder / f"{name}.py").write_text(text)
        paths.append(folder / f"{name}.py")
    return dict(zip(sources, grade_files(problem, paths, seed=0, timeout=timeout)))


def one_line(result) -> str:
    """The result's one failure line: the harness error, or the first failing check's message."""
    assert result.status != "solved", result
    text = result.error if result.status == "error" else next(t.message for t in result.tests if not t.passed)
    assert text and "\n" not in text and "Traceback" not in text, text
    return text


def gone(pid: int) -> bool:
    """The process is gone, or a zombie (dead, only its exit status left for its parent to read), waiting up to
    10 s for a SIGKILL already sent to land."""
    for _ in range(100):
        if _gone(pid):
            return True
        time.sleep(0.1)
    return False


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    status = Path(f"/proc/{pid}/status")
    return status.is_file() and any(ln.split()[1] == "Z" for ln in status.read_text().splitlines() if ln.startswith("State:"))


def test_bad_input_is_one_line_and_the_folder_is_untouched(tmp_path):
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "notes.txt").write_text("my notes\n")
    (folder / "instructions.md").write_text("# stars_and_bars\n")
    reference = STARS.reference()
    outside = Path.cwd() / f".nanolm-sandbox-test-{os.getpid()}.txt"  # neither the folder nor a temporary one
    sources = {
        "syntax": "def count_solutions(n, upper)\n    return 1\n",
        "missing_import": "import no_such_module_anywhere\n",
        "prints_10mb": "print('x' * 10_000_000)\n" + reference,
        "prints_in_a_check": reference + "\n_real = count_solutions\n\ndef count_solutions(n, upper):\n"
        "    print('y' * 2_000_000)\n    return _real(n, upper)\n",
        "wrong_type": "def count_solutions(n, upper):\n    return [n]\n",
        "chdir": "import os\nos.chdir('/')\n" + reference,
        "deletes": "import os\nos.remove('notes.txt')\n" + reference,
        "rmtree": "import shutil\nshutil.rmtree('.')\n" + reference,
        "overwrites_own_folder": f"open({str(folder / 'notes.txt')!r}, 'w').write('gone')\n" + reference,
        "overwrites_report": "open('instructions.md', 'w').write('gone')\n" + reference,
        "writes_outside": f"open({str(outside)!r}, 'w').write('x')\n" + reference,
        "writes_new_file": "open('scratch.txt', 'w').write('my scratch')\n" + reference,
        "reads_reference": "from nanolm.problems.registry import PROBLEMS\nexec(PROBLEMS['stars_and_bars'].reference())\n",
        "right": reference,
    }
    before = snapshot(folder)
    try:
        results = grade_sources(folder, STARS, sources)
    finally:
        written = outside.exists()
        outside.unlink(missing_ok=True)
    after = snapshot(folder)
    assert set(after) == set(before) | {f"{n}.py" for n in sources}  # no file added (scratch.txt went to the copy)
    assert all(after[name] == data for name, data in before.items())  # nor changed
    assert not written

    assert results["right"].status == "solved" and results["writes_new_file"].status == "solved"
    assert results["prints_in_a_check"].status == "not solved"  # the checks that print past the limit fail
    expect = {
        "syntax": "SyntaxError",
        "missing_import": "ModuleNotFoundError",
        "prints_10mb": "printed more than 1 MB",
        "prints_in_a_check": "printed more than 1 MB",
        "wrong_type": "exact integers",
        "chdir": "change the working folder",
        "deletes": "delete notes.txt",
        "rmtree": "grading does not let your code",
        "overwrites_own_folder": "write notes.txt",
        "overwrites_report": "write instructions.md",
        "writes_outside": f"write {outside.name}",
        "reads_reference": "reference solutions are not readable",
    }
    for name, words in expect.items():
        assert words in one_line(results[name]), (name, one_line(results[name]))
    for name in ("syntax", "missing_import", "prints_10mb", "chdir", "deletes", "overwrites_own_folder", "reads_reference"):
        assert results[name].status == "error" and results[name].exit_code == 2, name


def test_the_network_is_off(tmp_path):
    """connect, connect_ex (which returns an error code rather than raising), create_connection, name lookups."""
    fn = "\ndef count_solutions(n, upper):\n    return 0\n"
    sources = {
        "connect": "import socket\nsocket.socket().connect(('127.0.0.1', 9))\n" + fn,
        "connect_ex": "import socket\nsocket.socket().connect_ex(('127.0.0.1', 9))\n" + fn,
        "create_connection": "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)\n" + fn,
        "lookup": "import socket\nsocket.getaddrinfo('example.com', 80)\n" + fn,
        "udp": "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', 9))\n" + fn,
    }
    for name, result in grade_sources(tmp_path / "net", STARS, sources).items():
        assert result.status == "error" and "the network is off" in one_line(result), (name, result)


def test_a_child_process_dies_with_the_grading(tmp_path):
    """At the time limit the whole process group is killed, and after a normal end too."""
    pid_file, pid_file2 = tmp_path / "child.pid", tmp_path / "child2.pid"
    child = (
        "import os, subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', \"import os, time; "
        "open({0!r} + '.tmp', 'w').write(str(os.getpid())); os.replace({0!r} + '.tmp', {0!r}); time.sleep(300)\"])\n"
        "while not os.path.exists({0!r}):\n    time.sleep(0.01)\n"
    )  # the child has started
    looping = child.format(str(pid_file)) + "import time\nwhile True:\n    time.sleep(0.05)\n"
    result = grade_sources(tmp_path / "a", STARS, {"loops": looping}, timeout=3)["loops"]
    assert result.status == "error" and result.error_kind == "timeout" and "time limit" in result.error
    assert pid_file.is_file() and gone(int(pid_file.read_text()))

    finishing = child.format(str(pid_file2)) + STARS.reference()
    result = grade_sources(tmp_path / "b", STARS, {"finishes": finishing})["finishes"]
    assert result.status == "solved" and pid_file2.is_file() and gone(int(pid_file2.read_text()))


def test_the_result_line_cannot_be_forged(tmp_path):
    """What the code writes to file descriptor 1 goes to the log, not to the grader's result channel."""
    forged = (
        'import os\nos.write(1, b\'\\nNANOLM-PROBLEMS-RESULT {"results": [{"file": "x", "tests": '
        '[{"name": "small_cases", "title": "t", "passed": true, "message": ""}]}]}\\n\')\nos._exit(0)\n'
    )
    result = grade_sources(tmp_path / "f", STARS, {"forged": forged})["forged"]
    assert result.status == "error" and result.error_kind == "crash" and "without a result" in result.error


@pytest.mark.parametrize(
    "problem, source, words",
    [
        ("logit_lens", "import torch\n\ndef logit_lens(model, tokens):\n    return torch.zeros(3)\n", "expected ["),
        ("linear_probe", "def linear_probe(X, y, test_fraction=0.25, seed=0):\n    return [0.5]\n", "return a dict"),
        (
            "dfa_to_rnn",
            "import numpy as np\n\ndef dfa_to_rnn(dfa):\n    return {k: np.zeros(2) for k in "
            "('W_ih', 'W_hh', 'b', 'h0', 'w_out')}\n",
            "has shape",
        ),
        ("seed_noise", "def decide(baseline, candidate):\n    return True\n", 'return "result" or "noise"'),
        (
            "gamblers_ruin",
            "def ruin_probability(p, start, target):\n    return None\n\n"
            "def simulate_ruin(p, start, target, n, seed):\n    return 0.5\n",
            "not a number",
        ),
    ],
    ids=["logit_lens", "linear_probe", "dfa_to_rnn", "seed_noise", "gamblers_ruin"],
)
def test_wrong_type_or_shape_is_a_failed_check_with_its_symptom(problem, source, words, tmp_path):
    result = grade_sources(tmp_path / problem, PROBLEMS[problem], {"answer": source})["answer"]
    assert result.status == "not solved" and result.passed == 0, result
    assert any(words in t.message for t in result.tests), [t.message for t in result.tests]
    for t in result.tests:
        assert t.message and "\n" not in t.message and "Traceback" not in t.message, t
