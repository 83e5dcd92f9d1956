"""`manage.py check_channels --once`: run one probe round now and print what it found."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from channels.health import services
from channels.health.schedule import get_probe_schedule


class Command(BaseCommand):
    help = "Probe every enabled channel (or the ones named) and update their status."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="run one round and exit (default: repeat)")
        parser.add_argument("--channel", action="append", default=[], help="channel name or id (repeatable)")
        parser.add_argument("--interval", type=int, default=None, help="seconds between rounds (default: schedule)")

    def handle(self, *args, once: bool, channel: list[str], interval: int | None, **options):
        from channels.models import Channel
        from portal.forms import pk_from

        ids = None
        if channel:
            ids = []
            for ref in channel:
                pk = pk_from(ref)
                ch = Channel.objects.filter(pk=pk).first() if pk is not None else None
                ch = ch or Channel.objects.filter(name=ref).first()
                if ch is None:
                    raise CommandError(f"No channel named {ref!r}.")
                ids.append(ch.pk)
        while True:
            started = time.perf_counter()
            done = services.run_round(ids, force=bool(ids))
            for d in done:
                r = d.result
                timing = (
                    f"ttft {r.ttft_ms:.0f} ms" if r and r.ttft_ms is not None else (r.error or "ok") if r else "traffic"
                )
                arrow = f"{d.old_status} → {d.new_status}" if d.changed else d.new_status
                self.stdout.write(f"{d.channel.name:30} {arrow:32} {timing:18} {d.message}")
            self.stdout.write(f"{len(done)} channels in {time.perf_counter() - started:.2f} s")
            if once:
                return
            time.sleep(interval or get_probe_schedule()["interval_seconds"])
