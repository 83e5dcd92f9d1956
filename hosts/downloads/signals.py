"""Sent by the download services; `hosts.downloads.tasks` connects the receiver that queues the
next step, so the services never import the tasks that call them."""

from django.dispatch import Signal

# A download needs a step (after the commit that created it, or after a step that left it
# active): `download_id`, `countdown` seconds to wait first. The receiver raises when the broker does
# not take it (`services.send` marks the job for the sweep).
step_needed = Signal()
