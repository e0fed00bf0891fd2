"""gunicorn settings for the embedded default (`make run`): start the in-process sweeper."""


def post_worker_init(worker):
    from phantomhub.waste.embedded import sweeper_start

    sweeper_start()
