"""The routing explanation's line templates (`keys.usage.explanation`): the gateway builds the same
English lines as before, and every line is read back to its template and values."""

from __future__ import annotations

import re

import pytest
from django.utils import translation

from gateway.call import attempt_note
from gateway.catalog import window_filter
from gateway.errors import Attempt, Failure
from keys.usage import explanation as lines

PLACEHOLDER = re.compile(r"%\((\w+)\)s")

# What the f-strings before the templates wrote, next to the template and values that replace them.
BEFORE = [
    (f"alias {'coder'} -> {', '.join(['qwen3-coder', 'qwen3-coder-plus'])}", lines.ALIAS,
     {"alias": "coder", "targets": "qwen3-coder, qwen3-coder-plus"}),
    (f"pinned to channel #{7} (playground test)", lines.PINNED, {"channel": 7}),
    (f"skipped {'qwen3-coder'}: disabled", lines.SKIPPED, {"channel": "qwen3-coder", "why": lines.DISABLED}),
    (f"skipped {'cloud'}: external channel, key is local-only", lines.SKIPPED,
     {"channel": "cloud", "why": lines.EXTERNAL_FOR_KEY}),
    (f"skipped {'cloud'}{' (qwen3-coder-plus)'}: external channel, model is local-only", lines.SKIPPED_TARGET,
     {"channel": "cloud", "model": "qwen3-coder-plus", "why": lines.EXTERNAL_FOR_MODEL}),
    (f"skipped {'vllm-b'}: not the channel under test", lines.SKIPPED,
     {"channel": "vllm-b", "why": lines.NOT_UNDER_TEST}),
    (f"skipped {'local-llama'} ({'qwen3-coder'}): window {24_576:,} < {31_120:,} needed", lines.SKIPPED_TARGET,
     {"channel": "local-llama", "model": "qwen3-coder",
      "why": lines.WINDOW % {"window": f"{24_576:,}", "need": f"{31_120:,}"}}),
    (f"skipped {'free-tier'}: no price, and this key has a budget", lines.SKIPPED,
     {"channel": "free-tier", "why": lines.NO_PRICE}),
    (f"{'affinity hit'}: {'vllm-a'} of {3}", lines.CHOSEN,
     {"policy": lines.AFFINITY_HIT, "channel": "vllm-a", "count": 3}),
    (f"{'least busy'}: {'vllm-a'} of {2}", lines.CHOSEN, {"policy": lines.LEAST_BUSY, "channel": "vllm-a", "count": 2}),
    (f"{'weighted'}: {'vllm-a'} of {2}", lines.CHOSEN, {"policy": lines.BY_WEIGHT, "channel": "vllm-a", "count": 2}),
    (f"failover after {502} from {'local-llama'}", lines.FAILOVER, {"error": 502, "channel": "local-llama"}),
    (f"failover after {Failure.CONNECT} from {'local-llama'}", lines.FAILOVER,
     {"error": Failure.CONNECT, "channel": "local-llama"}),
    ("every route failed", lines.ALL_FAILED, {}),
    (f"sent to {'cloud'}", lines.SENT, {"channel": "cloud"}),
    (f"sent to {'cloud'}{' (qwen3-coder-plus)'}", lines.SENT_TARGET, {"channel": "cloud", "model": "qwen3-coder-plus"}),
    (f"waited {12.345:.1f} s for the on-demand model to start", lines.WAITED, {"seconds": f"{12.345:.1f}"}),
    (f"refused: {'context_length_exceeded'}", lines.REFUSED, {"code": "context_length_exceeded"}),
]  # fmt: skip


@pytest.mark.parametrize(("before", "template", "values"), BEFORE, ids=[b for b, _, _ in BEFORE])
def test_the_gateway_writes_the_same_english_as_before(before, template, values):
    line = template % values if values else template
    assert line == before  # byte for byte: stored records, the X-Portal-Route header and logs are unchanged
    assert lines.parse(line) == (template, {k: str(v) for k, v in values.items()})


def test_the_gateways_own_builders_write_the_lines_as_before():
    assert attempt_note(Attempt(1, "local-llama", Failure.SERVER_ERROR, 502)) == "failover after 502 from local-llama"
    assert attempt_note(Attempt(1, "local-llama", Failure.CONNECT)) == "failover after connect from local-llama"

    class Route:
        context_window, max_output_tokens = 24_576, None

    assert window_filter(30_000, 1_120)(Route()) == "window 24,576 < 31,120 needed"  # type: ignore[arg-type]


@pytest.mark.parametrize("template", lines.TEMPLATES)
def test_every_template_round_trips(template):
    names = PLACEHOLDER.findall(template)
    values = {name: f"{name}-value 1" for name in names}
    line = template % values if values else template
    assert lines.parse(line) == (template, values)
    assert "%%" not in template  # `parse` reads placeholders only


def test_the_templates_are_distinct_and_have_named_placeholders_only():
    assert len(set(lines.TEMPLATES)) == len(lines.TEMPLATES)
    for template in lines.TEMPLATES:
        assert "%" not in PLACEHOLDER.sub("", template), template


def test_a_line_is_rendered_through_the_catalog_with_its_nested_reason():
    line = "skipped qwen3-coder: disabled"
    with translation.override("zh-hans"):
        expected = translation.gettext(lines.SKIPPED) % {
            "channel": "qwen3-coder",
            "why": translation.gettext(lines.DISABLED),
        }
        assert lines.translated(line) == expected
    assert expected != line  # "disabled" has a translation already
    with translation.override("en"):
        assert lines.translated(line) == line


def test_a_line_no_template_matches_is_shown_as_stored():
    with translation.override("zh-hans"):
        assert lines.translated("routed by an older version") == "routed by an older version"
        assert lines.translated_lines(["skipped a: a reason from before"]) == [
            translation.gettext(lines.SKIPPED) % {"channel": "a", "why": "a reason from before"}
        ]
