#!/bin/sh
# One image, three roles: web (migrates, then gunicorn), worker (Celery), beat (Celery beat).
set -eu
role="${1:-web}"
case "$role" in
  web)
    python manage.py migrate --no-input
    exec gunicorn phantomhub.wsgi --bind "0.0.0.0:${PHANTOMHUB_PORT:-8000}" \
      --workers "${PHANTOMHUB_WEB_WORKERS:-4}" --access-logfile - --forwarded-allow-ips '*'
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
