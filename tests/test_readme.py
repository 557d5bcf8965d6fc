"""The figures the README quotes from its first command are what that command answers today."""
import json
import re
from pathlib import Path

from offloadsim.cli import main

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_quotes_the_first_commands_request_times(capsys):
    text = " ".join(README.read_text().split())
    command = re.search(r"offloadsim (plan qwen3-14b --machine \S+ --vram \S+)", text).group(1).split()
    quoted = re.search(r"([\d.]+) s for offloadsim's runner, ([\d.]+) s for llama\.cpp", text)
    assert main([*command, "--json"]) == 0
    engines = json.loads(capsys.readouterr().out)["engines"]
    assert quoted.group(1) == f"{engines['offloadsim']['request_s']:.1f}"
    assert quoted.group(2) == f"{engines['llamacpp']['request_s']:.1f}"
