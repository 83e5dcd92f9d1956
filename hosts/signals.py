"""Signals the launch-job machinery sends; `hosts.tasks` connects the receivers that enqueue work,
so `hosts.deployments.jobs` never imports the tasks that call it."""

from django.dispatch import Signal

# After the commit that created a job: `job_id`. The receiver queues the Celery task that runs it
# and raises when the broker does not take it (`jobs.send` marks the job for the sweep).
job_requested = Signal()

# A job left a server serving behind a freshly registered channel: `channel_id`. The receiver
# queues a health probe of the channel.
channel_registered = Signal()

# A deployment's status change the alert targets should hear of (a crash, a crash loop, how an
# automatic restart ended), after its commit: `event_id` (a `DeploymentEvent`).
deployment_event = Signal()

# A status change of an on-demand deployment, after its commit: `deployment_id`. The receiver
# (`hosts.ondemand`) tells the gateway processes waiting for its model.
on_demand_status_changed = Signal()
