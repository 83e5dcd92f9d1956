#!/bin/sh
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}" "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}"
mkdir -p "$PGDATA" /var/run/postgresql
chown -R postgres:postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
as_pg() { runuser -u postgres -- "$@"; }
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw=$(mktemp) && printf '%s\n' "$POSTGRES_PASSWORD" >"$pw" && chown postgres "$pw"
  as_pg initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pw" -A scram-sha-256 --auth-local=trust >/dev/null
  rm -f "$pw"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  as_pg pg_ctl -D "$PGDATA" -w -o "-c listen_addresses=''" start >/dev/null
  [ "$POSTGRES_DB" = postgres ] || as_pg createdb -U "$POSTGRES_USER" "$POSTGRES_DB"
  as_pg pg_ctl -D "$PGDATA" -w -m fast stop >/dev/null
fi
if [ "$1" = postgres ]; then
  shift
  exec runuser -u postgres -- postgres -D "$PGDATA" -c listen_addresses='*' "$@"
fi
exec "$@"
