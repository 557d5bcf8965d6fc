"""Parsing arguments loads no simulator machinery: --help and `hw list` start without scipy, numba, SimPy,
matplotlib or torch (each command's handler imports its machinery when it runs)."""
import json
import subprocess
import sys

import pytest

HEAVY = ("scipy", "numba", "simpy", "matplotlib", "torch")


def _loaded_after(code: str) -> list[str]:
    """The HEAVY packages in sys.modules after `code` runs in a fresh interpreter."""
    probe = f"import json, sys\n{code}\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_building_the_parser_imports_no_heavy_package():
    assert _loaded_after("import offloadsim.cli\noffloadsim.cli.build_parser()") == []


@pytest.mark.parametrize("argv", [["hw", "list"], ["hw", "parts"], ["hw", "show", "h200-testbox"], ["gap"]])
def test_hardware_commands_import_no_heavy_package(argv):
    code = f"import contextlib, io, offloadsim.cli\nwith contextlib.redirect_stdout(io.StringIO()):\n" \
           f"    assert offloadsim.cli.main({argv!r}) == 0"
    assert _loaded_after(code) == []


def test_a_command_still_gets_its_machinery_when_it_runs():
    code = "import contextlib, io, offloadsim.cli\nwith contextlib.redirect_stdout(io.StringIO()):\n" \
           "    assert offloadsim.cli.main(['simulate', 'llama-3.1-8b', '--new-tokens', '2']) == 0"
    assert "simpy" in _loaded_after(code)


def test_building_the_parser_imports_no_numpy_and_no_engine():
    """The validation commands' and the engines' arguments come from lazy handlers and a folder listing."""
    probe = "import json, sys\nimport offloadsim.cli\noffloadsim.cli.build_parser()\n" \
            "print(json.dumps(sorted(m for m in sys.modules if m == 'numpy' or m.startswith('sim.engines.')" \
            " or m.startswith('offloadsim.commands'))))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == []
