# PhantomHub server image. Three stages:
#   ui       Node builds the web UI (frontend/dist) as `make frontend` does: npm ci, npm run build;
#   wheel    the server's wheel, with the built UI inside (pyproject.toml: package data);
#   runtime  Python with that wheel installed, and no source tree and no Node: the one-shot
#            `migrate`, `web` (gunicorn), `worker` and `beat` (Celery) all run it, the role named
#            by the command (deploy/entrypoint.sh). tests/test_image_build.py runs the ui and wheel
#            stages' commands outside Docker and serves the UI from the installed wheel.
FROM node:20-slim AS ui
WORKDIR /src/frontend
COPY frontend/package.json frontend/package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error
COPY frontend ./
RUN npm run build

FROM python:3.11-slim AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY phantomhub ./phantomhub
COPY --from=ui /src/frontend/dist ./frontend/dist
RUN pip wheel --no-deps --wheel-dir wheels .

FROM python:3.11-slim AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=phantomhub.settings PHANTOMHUB_VAR_DIR=/app/var
WORKDIR /app
RUN useradd --system --create-home --uid 10001 phantomhub
COPY --from=wheel /src/wheels /tmp/wheels
RUN pip install /tmp/wheels/*.whl && rm -rf /tmp/wheels
COPY manage.py ./
COPY deploy ./deploy
# collectstatic needs settings; a throwaway key is fine at build time (no DB access). The files go
# to the installed package's STATIC_ROOT, beside the UI, read-only for the phantomhub user.
RUN PHANTOMHUB_SECRET_KEY=build-only-key-build-only-key-build-only python -m django collectstatic --no-input -v 0 \
    && chmod 0755 deploy/entrypoint.sh && mkdir -p /app/var/archive && chown -R phantomhub /app/var
USER phantomhub
EXPOSE 8000
ENTRYPOINT ["/app/deploy/entrypoint.sh"]
CMD ["web"]
