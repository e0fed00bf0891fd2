#!/bin/sh
# One image, three roles: web (migrates, then gunicorn), worker (Celery), beat (Celery beat).
set -eu
role="${1:-web}"
case "$role" in
  web)
    python manage.py migrate --no-input
    # Port (PHANTOMHUB_PORT, default 8000), workers and the proxies whose forwarded headers are
    # trusted (PHANTOMHUB_TRUSTED_PROXIES, none by default) come from deploy/gunicorn.py.
    exec gunicorn phantomhub.wsgi --config /app/deploy/gunicorn.py
    ;;
  worker)
    exec celery -A phantomhub worker --loglevel INFO --concurrency "${PHANTOMHUB_WORKER_CONCURRENCY:-2}"
    ;;
  beat)
    exec celery -A phantomhub beat --loglevel INFO --schedule /app/var/celerybeat-schedule
    ;;
  *)
    exec "$@"
    ;;
esac
