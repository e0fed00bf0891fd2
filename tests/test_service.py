"""Start-up configuration, health and the API description."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _django_setup(**env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PHANTOMHUB_")}
    clean.update(env, DJANGO_SETTINGS_MODULE="phantomhub.settings")
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT, env=clean, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"PHANTOMHUB_DEBUG": "maybe"}, "PHANTOMHUB_DEBUG='maybe' is not a boolean"),
        ({"PHANTOMHUB_DEBUG": "0", "PHANTOMHUB_SECRET_KEY_FILE": "/nonexistent"}, "PHANTOMHUB_SECRET_KEY"),
        ({"PHANTOMHUB_DEBUG": "1", "PHANTOMHUB_PORT": "80x"}, "PHANTOMHUB_PORT='80x' is not an integer"),
        ({"PHANTOMHUB_DEBUG": "1", "PHANTOMHUB_PORT": "70000"}, "PHANTOMHUB_PORT=70000 is above the maximum"),
        ({"PHANTOMHUB_DEBUG": "1", "PHANTOMHUB_DATABASE_URL": "mysql://x/y"}, "scheme must be postgres"),
        ({"PHANTOMHUB_DEBUG": "1", "PHANTOMHUB_DATABASE_URL": "postgres://h:99999/db"}, "invalid port"),
        ({"PHANTOMHUB_DEBUG": "1", "PHANTOMHUB_TARGET_MFU": "2"}, "PHANTOMHUB_TARGET_MFU=2.0 is outside"),
    ],
)
def test_a_bad_setting_stops_start_up_with_a_message_naming_it(env: dict[str, str], message: str) -> None:
    result = _django_setup(**env)
    assert result.returncode != 0
    assert "ConfigError" in result.stderr and message in result.stderr


def test_good_settings_start(tmp_path: Path) -> None:
    result = _django_setup(
        PHANTOMHUB_SECRET_KEY="x" * 40,
        PHANTOMHUB_DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3",
        PHANTOMHUB_ALLOWED_HOSTS="phantomhub.internal",
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.django_db
def test_health_answers_ok_without_a_token(client) -> None:  # type: ignore[no-untyped-def]
    response = client.get("/api/v1/health")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_the_openapi_schema_describes_the_ingest_contract(client) -> None:  # type: ignore[no-untyped-def]
    response = client.get("/api/schema/?format=json")
    assert response.status_code == 200
    schema = response.json()
    for path in [
        "/api/v1/runs",
        "/api/v1/runs/{run_id}/steps",
        "/api/v1/runs/{run_id}/samples",
        "/api/v1/runs/{run_id}/events",
    ]:
        assert path in schema["paths"], path
    step_columns = schema["components"]["schemas"]["StepColumnsRequest"]["properties"]
    assert {"step", "t_start_ns", "dur_ns", "comm_ns", "flops", "alloc_retries"} <= set(step_columns)
    assert client.get("/api/docs/").status_code == 200


def test_the_openapi_schema_validates_without_warnings(tmp_path: Path) -> None:
    from django.core.management import call_command

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yml"))
    assert "/api/v1/portal/runs" in (tmp_path / "schema.yml").read_text()
