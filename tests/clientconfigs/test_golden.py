"""Each client's output for a fixed input, compared byte for byte with the files under golden/.

Regenerate after an intended change with `UPDATE_GOLDEN=1 uv run pytest tests/clientconfigs/test_golden.py`
and review the diff like code.
"""

from __future__ import annotations

import os
import re

import pytest

from clientconfigs.clients import CLIENTS

from .conftest import GOLDEN


def outputs(slug: str, inp) -> dict[str, str]:
    rendered = CLIENTS[slug].render(inp)
    out = {}
    for i, f in enumerate(rendered.files):
        out[f"{i:02d}-" + re.sub(r"[^A-Za-z0-9.]+", "_", f.path.rsplit("/", 1)[-1]).strip("_")] = f.content
    if rendered.commands:
        out["commands.txt"] = "".join(f"{c.label}\n{c.text}\n\n" for c in rendered.commands)
    if rendered.links:
        out["links.txt"] = "".join(f"{link.label}\n{link.url}\n\n" for link in rendered.links)
    return out


@pytest.mark.parametrize("slug", sorted(CLIENTS))
def test_output_matches_golden_files(slug, variant):
    name, inp = variant
    folder = GOLDEN / slug / name
    produced = outputs(slug, inp)
    if os.environ.get("UPDATE_GOLDEN"):
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        for fname, text in produced.items():
            (folder / fname).write_text(text)
    expected = {p.name: p.read_text() for p in sorted(folder.iterdir())}
    assert produced == expected
