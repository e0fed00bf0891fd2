#!/bin/sh
# One image, four roles: migrate (once per deploy, before the others start), web (gunicorn),
# worker (Celery) and beat (Celery beat, exactly one per deployment). Web never migrates: with
# several web containers each would race the others through the same migrations.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
export DJANGO_SETTINGS_MODULE="${DJANGO_SETTINGS_MODULE:-phantomhub.settings}"
role="${1:-web}"
case "$role" in
  migrate)
    exec python -m django migrate --no-input
    ;;
  web)
    # Port (PHANTOMHUB_PORT, default 8000), workers and the proxies whose forwarded headers are
    # trusted (PHANTOMHUB_TRUSTED_PROXIES, none by default) come from deploy/gunicorn.py.
    exec gunicorn phantomhub.wsgi --config "$here/gunicorn.py"
    ;;
  worker)
    # Named after the container (Docker sets HOSTNAME), as deploy/healthcheck.py worker pings it.
    # No gossip, mingle or event heartbeats: nothing here reads them, and they made an idle worker
    # cost twice the CPU (bench/worker_idle.py: 1.5 ms a second instead of 0.75); ping still answers.
    exec celery -A phantomhub worker --hostname "celery@${HOSTNAME:-%h}" --loglevel INFO \
      --without-gossip --without-mingle --without-heartbeat \
      --concurrency "${PHANTOMHUB_WORKER_CONCURRENCY:-2}"
    ;;
  beat)
    # deploy/healthcheck.py beat reads this file's age: beat rewrites it every few minutes.
    exec celery -A phantomhub beat --loglevel INFO --schedule "${PHANTOMHUB_VAR_DIR:-/app/var}/celerybeat-schedule"
    ;;
  *)
    exec "$@"
    ;;
esac
