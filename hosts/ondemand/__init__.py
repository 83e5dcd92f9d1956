"""Models on demand: a stopped deployment whose model the gateway starts on its first request.

`services.demand` (called by the gateway) opens one `ColdStart` per deployment (a named
constraint: concurrent requests on every replica share it); `placement` chooses the host by a
fresh `nvidia-smi` and the fit, making room by stopping idle on-demand deployments; the launch job
does the rest; `services.sweep_idle` (beat) stops deployments idle past their TTL.
"""
