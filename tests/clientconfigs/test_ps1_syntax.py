"""install.ps1 parses as PowerShell, in every language the portal serves it in.

No PowerShell runs on this machine (Debian has no package, its registries here serve none), so
the Windows installer is checked with tree-sitter's PowerShell grammar: a missing brace, an
unclosed string or a bad here-string in the served script fails here, not on a developer's machine.
What it does when it runs is mirrored step by step from install.py (tests/clientconfigs/test_jsonc.py
names each step's twin).
"""

from __future__ import annotations

import pytest
import tree_sitter
import tree_sitter_powershell
from django.conf import settings

from clientconfigs import installer

PARSER = tree_sitter.Parser(tree_sitter.Language(tree_sitter_powershell.language()))


def syntax_errors(source: bytes) -> list[str]:
    """Each ERROR or MISSING node as `line:column: text`, the way an editor would point at it."""
    found: list[str] = []
    stack = [PARSER.parse(source).root_node]
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            line, column = node.start_point
            text = source[node.start_byte : node.start_byte + 60].decode(errors="replace")
            found.append(f"{line + 1}:{column + 1}: {node.type} {text!r}")
        elif node.has_error:
            stack.extend(node.children)
    return found


@pytest.mark.parametrize("language", [code for code, _ in settings.LANGUAGES])
def test_the_served_install_ps1_parses(language):
    script = installer.ps1_script("https://portal.example", "https://gateway.example", language)
    assert syntax_errors(script.encode()) == []


@pytest.mark.parametrize(
    "broken",
    [
        "function Add-Entry {\n  if ($a { Write-Host $a }\n}\n",  # an unclosed condition
        'Write-Host "unclosed\n',  # an unclosed string
        "$x = @{ a = 1\n",  # an unclosed hashtable
    ],
)
def test_the_check_sees_a_broken_script(broken):
    """The check can fail: each of these is a mistake PowerShell refuses to run."""
    assert syntax_errors(broken.encode())
