"""Everything the portal runs on a GPU host over SSH.

`ssh` is the connection (pinned host key, one `SSHError` per failure); `inventory` reads the GPUs
with nvidia-smi; `commands` holds the shell commands launch jobs and fit checks run (start a
detached server, is it alive, stop it, its pid file and log, is a port taken, read a model's files).
"""
