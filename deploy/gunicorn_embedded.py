"""gunicorn settings for the embedded default (`make run`): start the in-process sweeper."""


def post_worker_init(worker):  # noqa: ANN001, ANN201 - gunicorn hook signature
    from phantomhub.waste.embedded import sweeper_start

    sweeper_start()
