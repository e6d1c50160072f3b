"""Three homes by audience (docs/architecture.md#three-homes): the analysis needs its own extra and says so."""

from __future__ import annotations

import subprocess
import sys

import pytest

# scipy hidden from the interpreter, as in an install without the [report] extra.
HIDE_SCIPY = "import sys; sys.modules['scipy'] = None; "


@pytest.mark.parametrize(
    "command", ["twinkle_exp.report", "twinkle_exp.report.findings", "twinkle_exp.report.tuning"]
)
def test_a_report_command_without_the_extra_says_which_to_install_in_one_line(command):
    # argv[0] is "-m" while `python -m` loads the package, as runpy sets it
    code = HIDE_SCIPY + f"sys.argv = ['-m']; import runpy; runpy.run_module({command!r}, run_name='__main__')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "twinkle_exp: twinkle_exp.report needs the [report] extra (scipy not installed): "
        "pip install 'twinkle_exp[report]'"
    ]


def test_importing_the_report_without_the_extra_raises_with_the_hint():
    code = HIDE_SCIPY + "import twinkle_exp.report"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "ModuleNotFoundError: twinkle_exp.report needs the [report] extra" in proc.stderr
