# Gateway Portal production image: web (uvicorn), worker and beat all run from it.
#   docker build -t gateway-portal .
#   docker build --build-arg BASE_IMAGE=registry.example.com/python:3.11-slim -t gateway-portal .
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PROJECT_ENVIRONMENT=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PORTAL_DATA_DIR=/data

RUN pip install --no-cache-dir "uv>=0.5,<1" \
    && groupadd --system --gid 10001 portal \
    && useradd --system --uid 10001 --gid portal --home-dir /app --shell /usr/sbin/nologin portal

WORKDIR /app

# Dependencies first (cached while only the code changes), exactly as locked in uv.lock.
COPY pyproject.toml uv.lock README.md ./
RUN uv sync --frozen --no-dev --no-install-project

COPY . .
RUN uv sync --frozen --no-dev \
    # Static files into the data folder; the named volume is seeded from it and the `migrate`
    # service refreshes it on every deploy. Build-time secrets are throwaway (not in the image).
    && mkdir -p /data \
    && PORTAL_DATA_DIR=/tmp/build DJANGO_SECRET_KEY=build-only PORTAL_KEY_HASH_SECRET=build-only \
       python manage.py collectstatic --noinput -v0 \
    && mv /tmp/build/staticfiles /data/staticfiles && rm -rf /tmp/build \
    && chown -R portal:portal /data \
    # The volume is seeded from this folder: private to the portal user (0700, files 0600), as
    # every process's umask (077, portal.env) keeps what it writes there later.
    && chmod -R go-rwx /data

USER portal
EXPOSE 8000
VOLUME ["/data"]

HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=4)"]

# One ASGI process per container; scale with replicas behind the proxy (see docker-compose.yml).
# X-Forwarded-For is believed from PORTAL_TRUSTED_PROXIES only (applied in portal.asgi), so uvicorn's
# own proxy-header handling is off.
CMD ["uvicorn", "portal.asgi:application", "--host", "0.0.0.0", "--port", "8000", \
     "--no-proxy-headers", "--no-access-log", "--timeout-graceful-shutdown", "20", "--timeout-keep-alive", "75"]
