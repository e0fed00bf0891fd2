"""gunicorn settings for the embedded default (`make run`): those of deploy/gunicorn.py.

Its post_worker_init starts the in-process sweeper when no broker is configured, and forwarded
headers are trusted only from PHANTOMHUB_TRUSTED_PROXIES; the Makefile binds 127.0.0.1 and picks
the worker count on the command line.
"""

import runpy
from pathlib import Path

globals().update(
    {
        name: value
        for name, value in runpy.run_path(str(Path(__file__).with_name("gunicorn.py"))).items()
        if not name.startswith("_") and name != "annotations"
    }
)
