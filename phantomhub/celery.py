"""The Celery app. Broker: Redis (PHANTOMHUB_REDIS_URL); without it tasks run in-process."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "phantomhub.settings")

app = Celery("phantomhub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
