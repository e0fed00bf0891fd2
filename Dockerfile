# PhantomHub server image: web (gunicorn), Celery worker and beat share it.
FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
RUN useradd --system --create-home --uid 10001 phantomhub
COPY pyproject.toml README.md ./
COPY phantomhub ./phantomhub
RUN pip install .
COPY manage.py ./
COPY deploy ./deploy
COPY deploy/entrypoint.sh /usr/local/bin/phantomhub-entrypoint
# collectstatic needs settings; a throwaway key is fine at build time (no DB access).
RUN PHANTOMHUB_SECRET_KEY=build-only-key-build-only-key-build-only python manage.py collectstatic --no-input -v 0 \
    && chmod 0755 /usr/local/bin/phantomhub-entrypoint && mkdir -p /app/var && chown phantomhub /app/var
USER phantomhub
EXPOSE 8000
ENTRYPOINT ["phantomhub-entrypoint"]
CMD ["web"]
