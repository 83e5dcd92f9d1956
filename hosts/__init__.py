"""GPU hosts over SSH: inventory, deployments of model servers as launch jobs, the VRAM fit."""
