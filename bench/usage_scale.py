"""Time the pages and API lists people open often at 100 k, 1 M and 10 M usage records.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/portal_bench_usage \\
        uv run python bench/usage_scale.py --sizes 100k,1M,10M --repeats 5

Each size starts from empty usage tables in the database DATABASE_URL names (created and migrated
when missing; SQLite works too, e.g. DATABASE_URL=sqlite:////tmp/bench.sqlite3 for the embedded
default up to 1 M). 200 developers in 20 teams, one key each, 50 models on 20 channels; each
developer uses two or three models (as people do), over the last 30 days. Records are generated in
SQL, and the hourly and daily rollups from them the way the gateway's writer keeps them (one
grouped INSERT each). 40 deployment runs over the month feed the GPU-hours page.

Every page is requested `--repeats` times through Django's test client (the whole view, template
and middleware, no HTTP server) after one warm-up; the table prints the median and the spread in
ms and the number of SQL queries, then each size's median against the smallest size's. With
`--database-per-size` each size lives in a database of its own (so 10 M is generated once and kept
with `--keep`), and the sizes are timed in alternating rounds in the same run:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/portal_bench_usage \
        uv run python bench/usage_scale.py --sizes 100k,10M --database-per-size --keep --repeats 5
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/portal_bench_usage")
# Generating 10 M rows takes minutes per statement; the pages timed are far below any deadline.
os.environ.setdefault("DATABASE_STATEMENT_TIMEOUT", "3600")

USERS, TEAMS, MODELS, CHANNELS, DAYS = 200, 20, 50, 20, 30


def parse_size(text: str) -> int:
    text = text.strip().lower()
    for suffix, factor in (("k", 1_000), ("m", 1_000_000)):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(text)


def ensure_database(name: str | None = None) -> None:
    url = os.environ["DATABASE_URL"]
    if not url.startswith("postgres"):
        return
    import psycopg

    base, default = url.rsplit("/", 1)
    name = name or default
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def use_database(name: str) -> None:
    """Point Django's connection at database `name` (PostgreSQL) from its next query on."""
    from django.conf import settings
    from django.db import connection

    connection.close()
    settings.DATABASES["default"]["NAME"] = name
    connection.settings_dict["NAME"] = name


def setup_people() -> dict:
    """Users, teams, keys, models, channels and deployment runs (once per database)."""
    from accounts.models import Team, User
    from channels.models import Channel
    from hosts.models import DeploymentRun
    from keys.models import Key
    from keys.services import issue_key

    admin = User.objects.filter(username="bench-admin").first()
    if admin is None:
        admin = User.objects.create_superuser(username="bench-admin", password="x" * 20)
        teams = [Team.objects.create(name=f"team-{t:02d}") for t in range(TEAMS)]
        for u in range(USERS):
            user = User.objects.create_user(username=f"dev-{u:03d}", password=None, team=teams[u % TEAMS])
            issue_key(owner=user, name="laptop")
        for c in range(CHANNELS):
            Channel.objects.create(name=f"gpu-{c:02d}", kind="vllm", base_url=f"http://127.0.0.1:{9000 + c}/v1")
    channels = list(Channel.objects.order_by("pk").values_list("pk", flat=True))
    if not DeploymentRun.objects.exists():
        now = dt.datetime.now(dt.UTC)
        runs = []
        for i in range(40):  # two runs per channel: a restart half-way through the month
            start = now - dt.timedelta(days=DAYS) if i < CHANNELS else now - dt.timedelta(days=DAYS / 2)
            stop = now - dt.timedelta(days=DAYS / 2, minutes=7) if i < CHANNELS else None
            runs.append(
                DeploymentRun(
                    deployment_name=f"dep-{i:02d}",
                    host_name=f"host-{i % 5}",
                    gpus=2,
                    channel_id=channels[i % CHANNELS],
                    started=start,
                    stopped=stop,
                )
            )
        DeploymentRun.objects.bulk_create(runs)
    developer = User.objects.get(username="dev-007")
    return {
        "admin": admin,
        "developer": developer,
        "keys": list(Key.objects.order_by("pk").values_list("pk", "owner_id", "owner__team_id")),
        "channels": channels,
    }


def _defaults(model, given: dict[str, str]) -> tuple[list[str], list[str]]:
    """Columns and SQL expressions for an INSERT … SELECT: `given` for the named columns, each other
    concrete field's Python default as a literal (so new columns need no change here)."""
    import json

    from django.db import connection

    columns, values = [], []
    for f in model._meta.concrete_fields:
        if f.primary_key:
            continue
        columns.append(connection.ops.quote_name(f.column))
        if f.column in given:
            values.append(given[f.column])
            continue
        default = f.get_default()
        if default is None:
            values.append("NULL")
        elif isinstance(default, bool):
            values.append("TRUE" if default else "FALSE")
        elif isinstance(default, int | float):
            values.append(str(default))
        elif isinstance(default, list | dict):
            values.append("'" + json.dumps(default) + "'")
        else:
            values.append("'" + str(default).replace("'", "''") + "'")
    return columns, values


def generate(n: int, people: dict) -> float:
    """Empty the usage tables and fill them with `n` records and their rollups; seconds taken."""
    from django.db import connection

    from keys.models import UsageDaily, UsageHourly, UsageRecord

    started = time.perf_counter()
    pg = connection.vendor == "postgresql"
    tables = [m._meta.db_table for m in (UsageRecord, UsageHourly, UsageDaily)]
    with connection.cursor() as c:
        if pg:
            c.execute(f"TRUNCATE {', '.join(tables)}")
            # Building each index once after the insert is several times faster than keeping a
            # dozen of them up to date row by row (10 M rows: minutes, not hours, on a loaded box).
            c.execute(
                "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.tablename = ANY(%s) AND NOT EXISTS "
                "(SELECT 1 FROM pg_constraint k WHERE k.conname = i.indexname)",
                [tables],
            )
            indexes = c.fetchall()
            for name, _definition in indexes:
                c.execute(f'DROP INDEX "{name}"')
            # No per-row foreign-key triggers either (the generated ids are the people's own).
            c.execute(
                "SET synchronous_commit = off; SET maintenance_work_mem = '512MB'; "
                "SET session_replication_role = replica"
            )
        else:
            indexes = []
            for table in tables:
                c.execute(f"DELETE FROM {table}")
        keys = people["keys"]
        channels = people["channels"]
        # A developer's models: 2 or 3 of the 50, each served by one channel (model m on channel m % 20).
        key_rows = ",".join(f"({i}, {k}, {u}, {t if t else 'NULL'})" for i, (k, u, t) in enumerate(keys))
        chan_rows = ",".join(f"({i}, {ch})" for i, ch in enumerate(channels))
        now = "now()" if pg else "datetime('now')"
        if pg:
            created = f"{now} - (g * {DAYS * 86400.0 / n}) * interval '1 second'"
            series = f"generate_series(1::bigint, {n}) AS g"
            pick = "mod(g * 7919, {m})"
            hour = "date_trunc('hour', r.created)"
            day = "r.created::date"
        else:
            created = f"strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (g * {DAYS * 86400.0 / n}) || ' seconds')"
            series = f"(WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < {n}) SELECT g FROM s)"
            pick = "((g * 7919) % {m})"
            hour = "strftime('%Y-%m-%d %H:00:00', r.created)"
            day = "date(r.created)"
        given = {
            "created": created,
            "model": "'model-' || ((k.i * 3 + " + pick.format(m=3) + ") % 50)",
            "key_id": "k.key_id",
            "user_id": "k.user_id",
            "team_id": "k.team_id",
            "channel_id": "c.ch",
            "request_id": "'r' || g",
            "prompt_tokens": f"100 + {pick.format(m=4000)}",
            "completion_tokens": f"10 + {pick.format(m=600)}",
            "total_tokens": f"110 + {pick.format(m=4000)} + {pick.format(m=600)}",
            "ttft_ms": f"20.0 + {pick.format(m=1500)}",
            "latency_ms": f"200.0 + {pick.format(m=9000)}",
        }
        columns, values = _defaults(UsageRecord, given)
        table = UsageRecord._meta.db_table
        chans_cte = f"chans(i, ch) AS (VALUES {chan_rows})"
        keys_cte = f"ks(i, key_id, user_id, team_id) AS (VALUES {key_rows})"
        if pg:
            select = (
                f"WITH {chans_cte}, {keys_cte} SELECT {', '.join(values)} FROM {series} "
                f"JOIN ks AS k ON k.i = mod(g, {len(keys)}) "
                f"JOIN chans AS c ON c.i = mod(mod(k.i * 3 + {pick.format(m=3)}, 50), {CHANNELS})"
            )
        else:
            select = (
                f"WITH {chans_cte}, {keys_cte} SELECT {', '.join(values)} FROM {series} "
                f"JOIN ks AS k ON k.i = (g % {len(keys)}) "
                f"JOIN chans AS c ON c.i = (((k.i * 3 + {pick.format(m=3)}) % 50) % {CHANNELS})"
            )
        c.execute(f"INSERT INTO {table} ({', '.join(columns)}) {select}")
        from keys.models import TTFT_BOUNDS_MS, TTFT_FIELDS

        hist, lower = {}, None
        for bound, name in zip((*TTFT_BOUNDS_MS, None), TTFT_FIELDS, strict=True):
            cond = [f"r.ttft_ms > {lower}"] if lower is not None else []
            cond += [f"r.ttft_ms <= {bound}"] if bound is not None else []
            hist[name] = f"SUM(CASE WHEN {' AND '.join(cond)} THEN 1 ELSE 0 END)"
            lower = bound
        sums = {
            "requests": "COUNT(*)",
            "errors": "SUM(CASE WHEN r.status <> 'ok' THEN 1 ELSE 0 END)",
            "prompt_tokens": "SUM(r.prompt_tokens)",
            "completion_tokens": "SUM(r.completion_tokens)",
            "total_tokens": "SUM(r.total_tokens)",
            "estimated_requests": "SUM(CASE WHEN r.estimated THEN 1 ELSE 0 END)",
            "cached_tokens": "SUM(r.cached_tokens)",
            "cache_creation_tokens": "SUM(r.cache_creation_tokens)",
        }
        dims = {"user_id": "r.user_id", "key_id": "r.key_id", "model": "r.model", "channel_id": "r.channel_id"}
        dims["team_id"] = "r.team_id"
        for rollup, period_col, period in ((UsageHourly, "hour", hour), (UsageDaily, "day", day)):
            extra = {**sums, **(hist if rollup is UsageHourly else {})}
            cols, vals = _defaults(rollup, {period_col: period, **dims, **extra})
            group = ", ".join([period, *dims.values()])
            # In the order the gateway's writer creates buckets, as time passes: a hash aggregate's
            # order would scatter an hour's (or a day's) rows over the whole table.
            c.execute(
                f"INSERT INTO {rollup._meta.db_table} ({', '.join(cols)}) "
                f"SELECT {', '.join(vals)} FROM {table} AS r GROUP BY {group} ORDER BY {period}"
            )
        for _name, definition in indexes:
            c.execute(definition)
        if pg:
            c.execute("SET session_replication_role = DEFAULT")
    if pg:  # as autovacuum leaves a table: statistics and the visibility map (index-only scans)
        with connection.cursor() as c:
            for t in tables:
                c.execute(f"VACUUM ANALYZE {t}")
    return time.perf_counter() - started


PAGES = [
    ("admin dashboard", "admin", "/"),
    ("developer dashboard", "developer", "/"),
    ("my usage (30 d)", "developer", "/usage/"),
    ("usage by user (30 d)", "admin", "/usage/all/?group_by=user"),
    ("usage by key (30 d)", "admin", "/usage/all/?group_by=key"),
    ("usage by model (30 d)", "admin", "/usage/all/?group_by=model"),
    ("usage by key CSV", "admin", "/usage/all/?group_by=key&format=csv"),
    ("request list", "admin", "/usage/requests/"),
    ("request list, page 50", "admin", "/usage/requests/?page=50"),
    ("request list, one model", "admin", "/usage/requests/?model=model-7"),
    ("GPU-hours (this month)", "admin", "/gpu-hours/"),
    (
        "GPU-hours (last month)",
        "admin",
        "/gpu-hours/?month=" + f"{dt.date.today().replace(day=1) - dt.timedelta(days=1):%Y-%m}",
    ),
    ("API usage summary by key", "admin", "/api/usage/summary/?group_by=key"),
    ("API usage records", "admin", "/api/usage/records/"),
    ("API usage daily", "admin", "/api/usage/daily/"),
]


SCANS = ("Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Heap Scan")


def plan_of(sql: str) -> tuple[int, int, list[str]]:
    """(rows read, shared buffers touched, scans) of one query by EXPLAIN ANALYZE: the rows every
    scan node returned plus those its filter dropped, times its loops; load does not change them.
    On SQLite only the scans (EXPLAIN QUERY PLAN), rows read -1."""
    from django.db import connection

    with connection.cursor() as c:
        if connection.vendor != "postgresql":
            c.execute("EXPLAIN QUERY PLAN " + sql)
            return -1, -1, [row[-1] for row in c.fetchall() if row[-1].startswith(("SCAN", "SEARCH"))]
        c.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql)
        plan = c.fetchone()[0][0]["Plan"]
    rows, scans, todo = 0, [], [plan]
    buffers = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
    while todo:
        node = todo.pop()
        todo += node.get("Plans", [])
        if node["Node Type"] in SCANS:
            loops = node.get("Actual Loops", 1)
            read = (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * loops
            rows += read
            where = node.get("Index Name") or node.get("Relation Name", "")
            scans.append(f"{node['Node Type']} {where} ({read:,} rows)")
    return rows, buffers, scans


def explain_pages(people: dict) -> dict[str, tuple[int, int, list[str]]]:
    """Each page's queries, once, through `plan_of`: (rows read, buffers, scans) per page."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from rest_framework.test import APIClient

    out = {}
    for name, who, path in PAGES:
        client = APIClient() if path.startswith("/api/") else Client()
        client.force_login(people[who])
        with CaptureQueriesContext(connection) as queries:
            response = client.get(path)
            if getattr(response, "streaming", False):
                b"".join(response.streaming_content)
        rows = buffers = 0
        scans: list[str] = []
        for q in queries.captured_queries:
            if not q["sql"].lstrip().upper().startswith(("SELECT", "WITH")) or "django_session" in q["sql"]:
                continue
            r, b, s = plan_of(q["sql"])
            rows, buffers, scans = rows + r, buffers + b, scans + s
        out[name] = (rows, buffers, scans) if connection.vendor == "postgresql" else (-1, -1, scans)
    return out


def count(n: int) -> str:
    return f"{n:,}" if n >= 0 else "–"  # SQLite: EXPLAIN QUERY PLAN counts no rows


def time_pages(people: dict, repeats: int) -> dict[str, tuple[list[float], int]]:
    """Each page's times in ms (after one warm-up) and its query count."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from rest_framework.test import APIClient

    clients = {}
    for who in ("admin", "developer"):
        web = Client()
        web.force_login(people[who])
        api = APIClient()
        api.force_authenticate(people[who])
        clients[who] = (web, api)
    out = {}
    for name, who, path in PAGES:
        web, api = clients[who]
        client = api if path.startswith("/api/") else web
        response = client.get(path)  # warm-up
        assert response.status_code == 200, (name, response.status_code)
        times = []
        for _ in range(repeats):
            with CaptureQueriesContext(connection) as queries:
                t = time.perf_counter()
                response = client.get(path)
                if getattr(response, "streaming", False):
                    b"".join(response.streaming_content)
                times.append((time.perf_counter() - t) * 1000)
        out[name] = (times, len(queries))
    return out


def summary(times: list[float], queries: int) -> tuple[float, float, float, int]:
    return statistics.median(times), min(times), max(times), queries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100k,1M")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--keep",
        action="store_true",
        help="time the records the database holds when they are as many as a size asks (no new generation)",
    )
    parser.add_argument(
        "--pages", default="", help="time only the pages whose name contains one of these (comma-separated), e.g. GPU"
    )
    parser.add_argument(
        "--database-per-size",
        action="store_true",
        help="each size in a database of its own, DATABASE_URL's name + _ + the size (portal_bench_usage_10m), "
        "kept with --keep; the pages are then timed in rounds, one request of each page at each size a round",
    )
    args = parser.parse_args()
    if args.pages:
        wanted = [w.strip().lower() for w in args.pages.split(",") if w.strip()]
        PAGES[:] = [page for page in PAGES if any(w in page[0].lower() for w in wanted)]
    labels = [s.strip() for s in args.sizes.split(",")]
    sizes = [parse_size(s) for s in labels]
    default_db = os.environ["DATABASE_URL"].rsplit("/", 1)[1]
    databases = {
        n: f"{default_db}_{label.lower()}" if args.database_per_size else default_db
        for n, label in zip(sizes, labels, strict=True)
    }
    if args.database_per_size and not os.environ["DATABASE_URL"].startswith("postgres"):
        raise SystemExit("--database-per-size needs PostgreSQL")
    for name in set(databases.values()):
        ensure_database(name)
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    settings.ALLOWED_HOSTS = ["*"]
    settings.DEBUG = False
    results: dict[int, dict[str, tuple[float, float, float, int]]] = {}
    plans = {}
    people_of = {}
    from keys.models import UsageRecord

    def prepare(n: int) -> None:
        use_database(databases[n])
        call_command("migrate", verbosity=0)
        people_of[n] = setup_people()
        if args.keep and UsageRecord.objects.count() == n:
            print(f"# {n:,} records kept from the last run ({databases[n]})", flush=True)
        else:
            took = generate(n, people_of[n])
            print(f"# {n:,} records generated with their rollups in {took:.0f} s ({databases[n]})", flush=True)

    if args.database_per_size:
        for n in sizes:
            prepare(n)
        # Rounds, the sizes' order alternating, so that the box's load falls on every size alike.
        raw: dict[int, dict[str, tuple[list[float], int]]] = {n: {} for n in sizes}
        for round_ in range(args.repeats):
            for n in sizes if round_ % 2 == 0 else reversed(sizes):
                use_database(databases[n])
                for name, (times, queries) in time_pages(people_of[n], 1).items():
                    raw[n].setdefault(name, ([], queries))[0].extend(times)
        for n in sizes:
            use_database(databases[n])
            results[n] = {name: summary(times, queries) for name, (times, queries) in raw[n].items()}
            plans[n] = explain_pages(people_of[n])
    for n in sizes:
        if not args.database_per_size:
            prepare(n)
            results[n] = {name: summary(*timed) for name, timed in time_pages(people_of[n], args.repeats).items()}
            plans[n] = explain_pages(people_of[n])
        print(f"# {n:,} records", flush=True)
        for name, (median, low, high, queries) in results[n].items():
            rows, buffers, scans = plans[n][name]
            print(
                f"  {name:28} {median:8.1f} ms  ({low:.1f}-{high:.1f})  {queries} queries  "
                f"{count(rows)} rows read  {count(buffers)} buffers",
                flush=True,
            )
            for scan in scans:
                print(f"      {scan}", flush=True)
    base, top = min(sizes), max(sizes)
    sizes = sorted(sizes)
    print()
    print(
        "| page | "
        + " | ".join(f"{n:,} records: median ms (min-max), queries" for n in sizes)
        + f" | {top:,} ÷ {base:,} |"
    )
    print("|---|" + "--:|" * (len(sizes) + 1))
    for name, _who, _path in PAGES:
        cells = []
        for n in sizes:
            median, low, high, queries = results[n][name]
            cells.append(f"{median:.0f} ({low:.0f}-{high:.0f}), {queries} q")
        ratio = results[top][name][0] / results[base][name][0]
        print(f"| {name} | " + " | ".join(cells) + f" | {ratio:.2f}× |")
    print()
    print("| page | " + " | ".join(f"{n:,}: rows read, buffers" for n in sizes) + " |")
    print("|---|" + "--:|" * len(sizes))
    for name, _who, _path in PAGES:
        cells = [f"{count(plans[n][name][0])}, {count(plans[n][name][1])}" for n in sizes]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
