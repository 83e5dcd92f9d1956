"""Wide tables on a phone (390 by 844 px): each keeps its columns readable and scrolls sideways inside
its own box, while the page itself never scrolls sideways."""

from __future__ import annotations

import pytest
from django.utils import timezone

from channels.models import Channel, Model, ModelRoute
from keys.models import UsageRecord
from keys.services import issue_key
from tests.browser.robot import Robot, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PHONE = {"width": 390, "height": 844}

# Every table on the page: its box's widths, and the words its cells break inside (a word split
# over two lines: its characters' rectangles on more than one line). A name may wrap where any text
# may (after a hyphen, a slash or an ellipsis), so the parts between those count as the words.
MEASURE = """() => [...document.querySelectorAll('main table')].map(table => {
  const box = table.closest('.table-wrap, .overflow-auto');
  const broken = [];
  for (const cell of table.querySelectorAll('th, td')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (node.parentElement.closest('.visually-hidden')) continue;
      const re = /[^\\s\\-\\/…]+/g;
      for (let m = re.exec(node.data); m; m = re.exec(node.data)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const lines = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (lines.size > 1) broken.push(m[0]);
      }
    }
  }
  return {id: table.id || table.className, boxed: !!box, box: box ? box.clientWidth : null,
          scroll: box ? box.scrollWidth : null, broken};
})"""


@pytest.fixture
def world(admin, alice):
    """A channel, a model, a key with limits and three requests: a row in every table looked at."""
    channel = Channel.objects.create(
        name="vllm-gpu-box-a", kind="vllm", base_url="http://127.0.0.1:9/v1", status="healthy"
    )
    model = Model.objects.create(name="qwen3-coder-30b-a3b-instruct")
    ModelRoute.objects.create(model=model, channel=channel, upstream_model="Qwen/Qwen3-Coder-30B-A3B-Instruct")
    key, _ = issue_key(owner=alice, name="laptop-continue", requests_per_minute=60, tokens_per_day=1_000_000)
    for i in range(3):
        UsageRecord.objects.create(
            key=key,
            user=alice,
            model=model.name,
            channel=channel,
            request_id=f"req-{i}",
            created=timezone.now(),
            prompt_tokens=12345,
            completion_tokens=678,
            total_tokens=13023,
        )


@pytest.mark.parametrize(
    "who,path",
    [("alice", "/keys/"), ("alice", "/usage/"), ("admin", "/channels/"), ("admin", "/usage/requests/")],
)
def test_a_wide_table_scrolls_in_its_box_on_a_phone_with_its_words_whole(live_server, browser, world, who, path):
    robot = Robot(browser.new_context(viewport=PHONE).new_page(), live_server.url)
    robot.goto("/login/")
    robot.log_in(who, f"{who}-pass-123")
    robot.goto(path)
    wait_until(robot.page, f"() => window.innerWidth === {PHONE['width']}")
    tables = robot.page.evaluate(MEASURE)
    assert tables
    assert robot.overflow_px() <= 0, robot.overflowing()
    for table in tables:
        assert table["boxed"], table
        assert table["broken"] == [], table
    assert any(t["scroll"] > t["box"] for t in tables), tables  # wider than the phone: it scrolls in its box
