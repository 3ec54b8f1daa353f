"""The README's set-up scripts (scripts/setup-env.sh, test.sh, test-openmpi.sh) refuse what they cannot do, in words,
before they make or change anything (session 63's review of the two fresh-machine commands).

Each test runs a copy of the scripts in a temporary checkout, so that the real .venv is never touched, and stops before
anything is downloaded.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def checkout(tmp_path):
    """A temporary checkout holding only scripts/ (with an empty requirements file)."""
    root = tmp_path / "checkout"
    shutil.copytree(ROOT / "scripts", root / "scripts")
    (root / "scripts" / "requirements.txt").write_text("")
    return root


def run(root, script, **environment):
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHON", "GRAPH_TEST_OPENMPI", "VIRTUAL_ENV")}
    env.update(environment)
    return subprocess.run(["bash", str(root / "scripts" / script)], cwd="/", env=env, capture_output=True, text=True,
                          timeout=120)


def sourced(root, **environment):
    """setup-env.sh is sourced by the others: run it the way they do."""
    wrapper = root / "scripts" / "source-setup.sh"
    wrapper.write_text('source "$(dirname "$0")/setup-env.sh"\necho sourced\n')
    return run(root, "source-setup.sh", **environment)


@pytest.mark.skipif(shutil.which("g++") is None or shutil.which("cmake") is None, reason="setup-env.sh would install them")
@pytest.mark.parametrize(
    "python, message",
    [
        ("/bin/false", "PYTHON=/bin/false does not run as a Python interpreter; OpenMM 8.6.1 needs Python >= 3.10"),
        ("python3.no-such-version", "PYTHON=python3.no-such-version: no such command"),
    ],
)
def test_a_python_that_cannot_make_the_venv_is_refused_before_it(checkout, python, message):
    result = sourced(checkout, PYTHON=python)
    assert result.returncode == 1 and "sourced" not in result.stdout
    assert message in result.stderr, result.stderr
    assert not (checkout / ".venv").exists()


@pytest.mark.skipif(shutil.which("g++") is None or shutil.which("cmake") is None, reason="setup-env.sh would install them")
def test_an_old_python_is_refused_with_its_version(checkout, tmp_path):
    # A stand-in interpreter that reports 3.8 (a real 3.8 is rarely installed): python3 with sys.version_info patched.
    old = tmp_path / "python3.8"
    old.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import sys, platform; sys.version_info = (3, 8, 18); "
                   "platform.python_version = lambda: \"3.8.18\"; exec(sys.argv[1])' \"$2\"\n")
    old.chmod(0o755)
    result = sourced(checkout, PYTHON=str(old))
    assert result.returncode == 1
    assert f"PYTHON={old} is Python 3.8.18; OpenMM 8.6.1 needs Python >= 3.10" in result.stderr, result.stderr
    assert not (checkout / ".venv").exists()


@pytest.mark.skipif(shutil.which("g++") is None or shutil.which("cmake") is None, reason="setup-env.sh would install them")
def test_an_interrupted_venv_is_not_taken_for_a_made_one(checkout):
    # `python -m venv` writes bin/python first and bin/activate last: a set-up stopped in between left a .venv that
    # every later run took as made ("bin/activate: No such file or directory" until it was removed by hand).
    (checkout / ".venv" / "bin").mkdir(parents=True)
    (checkout / ".venv" / "bin" / "python").symlink_to(sys.executable)
    result = sourced(checkout, PYTHON="/bin/false")
    # The incomplete .venv goes to the branch that makes it again, whose first step checks PYTHON (here refused);
    # a made .venv would have been compared with PYTHON instead (".venv has Python ...").
    assert result.returncode == 1
    assert "PYTHON=/bin/false does not run as a Python interpreter" in result.stderr, result.stderr
    assert ".venv has Python" not in result.stderr


def test_bad_graph_test_openmpi_is_refused_before_the_set_up(checkout):
    for value in ("false", "yes", "OFF"):
        result = run(checkout, "test-openmpi.sh", GRAPH_TEST_OPENMPI=value)
        assert result.returncode == 1
        assert f"GRAPH_TEST_OPENMPI must be auto, on or off, not '{value}'" in result.stderr, result.stderr
    result = run(checkout, "test-openmpi.sh", GRAPH_TEST_OPENMPI="off")
    assert result.returncode == 0 and result.stderr == ""
    assert not (checkout / ".venv").exists()


def test_the_tests_refuse_a_checkout_path_with_a_space(tmp_path):
    root = tmp_path / "my work" / "openmm-graph"
    shutil.copytree(ROOT / "scripts", root / "scripts")
    result = run(root, "test.sh")
    assert result.returncode == 1
    assert f"the checkout's path '{root}' contains whitespace" in result.stderr, result.stderr
    assert not (root / ".venv").exists()
