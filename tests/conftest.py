"""Suite-wide fixtures: an owner / outsider pair of projects with tokens, and API clients; the
markers every test gets from what it needs (docs/testing.md); free ports for the servers tests start."""

from __future__ import annotations

import functools
import itertools
import os
import random
import re
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from hypothesis import settings as hypothesis_settings
from rest_framework.test import APIClient

from phantomhub.accounts.models import Project
from phantomhub.accounts.services import project_token_for_slugs
from tests.examples import examples

# Property tests that name no number of examples try hypothesis's 100, scaled as the rest
# (tests/examples.py: fewer in `make check`).
hypothesis_settings.register_profile("phantomhub", max_examples=examples(100))
hypothesis_settings.load_profile("phantomhub")

T0_NS = 1_790_000_000 * 10**9  # 2026-09-21, a plausible epoch-ns timestamp
TESTS = Path(__file__).resolve().parent

# -- markers from facts -----------------------------------------------------------------------------
# A test that uses one of these fixtures (directly or through another fixture) needs what the fixture
# starts; the marker says so, and `make check` leaves such tests out. Add a fixture here when you
# write one that starts a server, a worker or a browser.
NEEDS_FIXTURE: dict[str, frozenset[str]] = {
    # a real PhantomHub (gunicorn or Django's live server) in another process or thread
    "live_server": frozenset({
        "live_server",  # pytest-django's threaded live server
        "phantomhub",  # tests/agent/conftest.py: gunicorn on a temporary SQLite database
        "server",  # tests/e2e/conftest.py (served()), tests/alerts/test_end_to_end.py, test_restart.py
        "month_server",  # tests/e2e/test_period_costs_ui.py (served())
        "cpu_demo",  # tests/e2e/test_run_page_words.py (served())
        "stack",  # tests/test_fuzz_api.py: gunicorn and a Celery worker on the test database
        "production_server",  # tests/test_deploy_settings.py: gunicorn with deploy/gunicorn.py
        "image",  # tests/test_image_build.py: the built wheel's entrypoint roles
    }),
    # a Celery worker process, or the real Redis broker with tasks no longer eager
    "celery": frozenset({"worker", "broker", "stack", "image"}),
    # headless Chromium driven by Playwright
    "browser": frozenset({"browser", "page", "signed_in", "month_page"}),
}  # fmt: skip
# What every test of a module needs, known from the file alone: the browser tests live under
# tests/e2e; the agent's live training tests are tests/agent/test_*_live.py; a module that imports torch
# trains. `-m "not training"` then skips such files without importing them (torch alone takes seconds).
LIVE_AGENT_MODULE = "test_*_live.py"
_IMPORTS_TORCH = re.compile(r"^\s*(?:import torch\b|from torch\b|torch = pytest\.importorskip\()", re.M)


@functools.cache
def module_needs(path: Path) -> frozenset[str]:
    needs = set()
    if TESTS / "e2e" in path.parents:
        needs |= {"browser", "live_server"}
    if (path.parent == TESTS / "agent" and path.match(LIVE_AGENT_MODULE)) or _IMPORTS_TORCH.search(path.read_text()):
        needs.add("training")
    return frozenset(needs)


def needs_of(item: pytest.Item) -> set[str]:
    """The markers a test gets from what it uses: its fixtures (directly or through others), its module."""
    fixtures = set(getattr(item, "fixturenames", ()))
    needs = {marker for marker, names in NEEDS_FIXTURE.items() if fixtures & names}
    path = Path(str(item.path))
    if path.suffix == ".py":
        needs |= module_needs(path)
    return needs


def _deselects_all(markexpr: str, needs: frozenset[str]) -> bool:
    """Whether ``-m markexpr`` deselects every test that carries at least the markers ``needs``,
    whatever other markers it has."""
    if re.search(r"\w\s*\(", markexpr):  # marker keyword arguments: leave it to pytest
        return False
    from _pytest.mark.expression import Expression

    free = sorted(set(re.findall(r"[A-Za-z_][\w.-]*", markexpr)) - {"and", "or", "not"} - needs)
    if len(free) > 12:
        return False
    expression = Expression.compile(markexpr)
    for bits in itertools.product((False, True), repeat=len(free)):
        present = needs | {name for name, on in zip(free, bits, strict=True) if on}
        if expression.evaluate(present.__contains__):
            return False
    return True


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Under ``-m``, a test module none of whose tests could be selected is not even imported."""
    markexpr = config.option.markexpr
    if not markexpr or collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    needs = module_needs(collection_path.resolve())
    if needs and _deselects_all(markexpr, needs):
        return True
    return None


def xdist_group_of(item: pytest.Item) -> str:
    """The unit of work `make test` hands one xdist worker (``--dist loadgroup``): the test's
    module, so its module-scoped fixtures start once. Tests that share a session-scoped server
    (the e2e server, the agent tests' PhantomHub) are grouped by module too: the server is the
    worker's, started at most once per worker whatever modules it runs, and one group of every
    such module made one worker's share the whole pass's longest path (docs/testing.md)."""
    return item.nodeid.split("::", 1)[0]


def empties_the_database(item: pytest.Item) -> bool:
    """Whether the test leaves its worker's test database emptied: a transactional test (Django
    flushes every table after it, the rows the migrations seeded with them), or one whose server or
    worker processes write to it (their fixtures flush it when done)."""
    marker = item.get_closest_marker("django_db")
    transactional = bool(marker and (marker.kwargs.get("transaction") or marker.kwargs.get("reset_sequences")))
    fixtures = set(getattr(item, "fixturenames", ()))
    return (
        transactional
        or bool(fixtures & {"transactional_db", "live_server"})
        or any(item.get_closest_marker(name) for name in ("live_server", "celery"))
    )


@pytest.hookimpl(tryfirst=True)  # before -m deselects and before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in sorted(needs_of(item) - {m.name for m in item.iter_markers()}):
            item.add_marker(marker)
        if item.get_closest_marker("xdist_group") is None:
            group = xdist_group_of(item)
            # A module's tests that empty the database are a unit of their own, queued after the rest.
            item.add_marker(pytest.mark.xdist_group(group + (":late" if empties_the_database(item) else "")))


class WorkUnits:
    @pytest.hookimpl(trylast=True)  # after pytest-django's own order (database tests, then transactional ones)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        order_work_units(config, items)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(WorkUnits(), "phantomhub-work-units")


def order_work_units(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The order `make test` hands out work units in (it runs with --no-loadscope-reorder): first
    the tests that need the rows the migrations seeded (example prices), then the ones that empty a
    worker's database, so no worker runs one of the first after one of the second, as pytest-django
    orders a run in one process. Within each part the groups holding a `slow` test go first (a
    build, a seeded server, a restart: a minute or two each, which handed out last kept one worker
    busy after the others were done), then the groups with the most tests."""
    if not (getattr(config.option, "loadgroup", False) and hasattr(config, "workerinput")):
        return  # one process: pytest-django's order stands
    groups = [_group_of(item) for item in items]
    size: dict[str, int] = {}
    long: set[str] = set()
    for item, group in zip(items, groups, strict=True):
        size[group] = size.get(group, 0) + 1
        if item.get_closest_marker("slow") is not None:
            long.add(group)
    order = {
        id(item): (group.endswith(":late"), group not in long, -size[group]) for item, group in zip(items, groups, strict=True)
    }
    items.sort(key=lambda item: order[id(item)])
    _group_node_ids(items)


def _group_of(item: pytest.Item) -> str:
    return "_".join(
        sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")})
    )


def _group_node_ids(items: list[pytest.Item]) -> None:
    """What pytest-xdist's worker does for ``--dist loadgroup``: the group goes at the end of the
    node id (``tests/x.py::test_y@group``), where the scheduler reads it. xdist 3.8 writes it to
    ``item._nodeid``, which pytest 9 no longer reads (the id is ``item._id``), so without this
    every test is a work unit of its own and the groups are ignored."""
    from _pytest.nodeid import NodeId

    for item in items:
        if item.nodeid.rfind("@") > item.nodeid.rfind("]"):
            continue  # already grouped
        item._id = NodeId.parse(f"{item.nodeid}@{_group_of(item)}")  # type: ignore[attr-defined]


# -- free ports ---------------------------------------------------------------------------------------
# A server a test starts gets its port from free_port(). Ports come from a block of their own per xdist
# worker, below the kernel's ephemeral range (from which outgoing connections and port-0 binds draw): two
# workers never hand out the same port, and no client socket can take it between the choice and the bind.
PORT_BLOCK = 1000
PORT_FIRST = 20_000
_next_port: list[int] = []


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, for a server the test starts."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    first = PORT_FIRST + index * PORT_BLOCK
    if first + PORT_BLOCK > _ephemeral_low():  # no room below the ephemeral range: let the kernel pick
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    if not _next_port:
        _next_port.append(random.randrange(PORT_BLOCK))  # another checkout's run starts elsewhere in the block
    for _ in range(PORT_BLOCK):
        port = first + _next_port[0] % PORT_BLOCK
        _next_port[0] += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {first}-{first + PORT_BLOCK - 1}")


@dataclass
class Tenant:
    project: Project
    token: str
    client: APIClient

    def create_run(self, **fields: Any) -> str:
        run_id = str(fields.pop("id", uuid.uuid4()))
        response = self.client.post("/api/v1/runs", {"id": run_id, "name": "r", **fields}, format="json")
        assert response.status_code in (200, 201), response.content
        return run_id

    def post_steps(self, run_id: str, body: Any, **extra: Any) -> Any:
        return self.client.post(f"/api/v1/runs/{run_id}/steps", body, format="json", **extra)


@contextmanager
def rows_for_the_module(django_db_blocker: Any) -> Iterator[None]:
    """For a module-scoped fixture: the rows it makes inside are shared by the module's tests and
    rolled back when the module ends; each test's own transaction is a savepoint inside this one,
    so no test sees another's writes (docs/testing.md, "Rows a module shares")."""
    with django_db_blocker.unblock(), transaction.atomic():
        yield
        transaction.set_rollback(True)


def tenant_for(team: str, project: str) -> Tenant:
    """A project (made if missing, with its team) and a new token of it, as a Tenant."""
    issued = project_token_for_slugs(team_slug=team, project_slug=project)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.raw}")
    assert issued.token.project is not None
    return Tenant(project=issued.token.project, token=issued.raw, client=client)


@pytest.fixture
def owner(db: None) -> Tenant:
    return tenant_for("nlp", "llm-pretrain")


@pytest.fixture
def outsider(db: None) -> Tenant:
    return tenant_for("vision", "detector")


def steps_body(n: int = 10, *, rank: int = 0, first: int = 0, **columns: Any) -> dict[str, Any]:
    """A valid columnar batch of n steps of 100 ms each, overridable column by column."""
    steps: dict[str, Any] = {
        "step": list(range(first, first + n)),
        "t_start_ns": [T0_NS + (first + i) * 100_000_000 for i in range(n)],
        "dur_ns": [100_000_000] * n,
        "data_ns": [10_000_000] * n,
        "forward_ns": [30_000_000] * n,
        "backward_ns": [45_000_000] * n,
        "optimizer_ns": [5_000_000] * n,
        "comm_ns": [4_000_000] * n,
        "flops": [1.5e15] * n,
        "tokens": [4096] * n,
        "samples": [8] * n,
        "mem_allocated": [30 * 2**30] * n,
        "mem_reserved": [36 * 2**30] * n,
        "mem_peak": [34 * 2**30] * n,
        "alloc_retries": [0] * n,
    }
    steps.update(columns)
    return {"rank": rank, "steps": steps}
