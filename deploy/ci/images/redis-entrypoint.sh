#!/bin/sh
# Like the official image: a bare `redis-server …` listens for other containers and keeps /data.
if [ "$1" = redis-server ]; then
  shift
  exec redis-server --bind 0.0.0.0 --protected-mode no --dir /data "$@"
fi
exec "$@"
