"""deploy/kubernetes against the Kubernetes schemas and against the code it runs.

No cluster and no kubectl here: the base and the example overlay are rendered as `kubectl apply -k`
would (tests/kustomize_subset.py), every object is validated strictly (unknown fields refused)
with kubernetes-validate against each Kubernetes version docs/deployment.md names, and the objects
are held to the Dockerfile, deploy/entrypoint.sh, deploy/gunicorn.py, the URL conf and the
settings: the commands, ports, probes and environment they use must be the ones the code has.
The last tests run the containers' commands themselves, with only the paths the pods mount
writable: the migration gate and the Job on a fresh database, worker and beat passing their
liveness probes, and gunicorn answering the probes as the kubelet sends them.
"""

from __future__ import annotations

import ast
import http.client
import ipaddress
import os
import re
import runpy
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import kubernetes_validate
import pytest
import yaml
from django.conf import settings
from django.http.request import validate_host
from django.urls import resolve

from tests.conftest import free_port
from tests.kustomize_subset import RenderError, image_name, pod_spec, render, strategic_merge
from tests.test_deploy_files import COMPOSE, DOCKERFILE, _entrypoint_role, _healthcheck, _stages

ROOT = Path(__file__).resolve().parent.parent
KUBERNETES = ROOT / "deploy" / "kubernetes"
BASE = KUBERNETES / "base"
COLLECTOR = BASE / "node-collector"  # beside the base: an overlay lists both
OVERLAYS = sorted(path.parent for path in (KUBERNETES / "overlays").glob("*/kustomization.yaml"))
DOCS = (ROOT / "docs" / "deployment.md").read_text()
# The Kubernetes versions docs/deployment.md says the manifests are validated against.
VERSIONS = ("1.30", "1.31", "1.32", "1.33", "1.34", "1.35", "1.36", "1.37")
# Kept in the Secret `phantomhub`, never in the ConfigMap: passwords, keys and tokens.
SECRET_SETTINGS = {
    "PHANTOMHUB_SECRET_KEY",
    "PHANTOMHUB_DATABASE_URL",
    "PHANTOMHUB_REDIS_URL",
    "PHANTOMHUB_METRICS_TOKEN",
    "PHANTOMHUB_EMAIL_PASSWORD",
    "PHANTOMHUB_OIDC_CLIENT_SECRET",
}
# Without these the Kubernetes layout cannot run: settings refuse to start without a key, the
# database is the store of record, and without a broker the worker and beat would have nothing to do.
REQUIRED_SECRETS = {"PHANTOMHUB_SECRET_KEY", "PHANTOMHUB_DATABASE_URL", "PHANTOMHUB_REDIS_URL"}


def _kustomizations() -> list[Path]:
    return [BASE, *OVERLAYS]


def _collector(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The node collector's DaemonSet: the overlay's, or for the base the one beside it."""
    found = [obj for obj in objects if obj["kind"] == "DaemonSet"] or render(COLLECTOR)
    return _one(found, "DaemonSet", "phantomhub-node-collector")


def _one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [obj for obj in objects if obj["kind"] == kind and obj["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _app_workloads(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The workloads that run the server image, by role (web, worker, beat, migrate)."""
    return {
        "web": _one(objects, "Deployment", "phantomhub-web"),
        "worker": _one(objects, "Deployment", "phantomhub-worker"),
        "beat": _one(objects, "Deployment", "phantomhub-beat"),
        "migrate": _one(objects, "Job", "phantomhub-migrate"),
    }


def _main_container(workload: dict[str, Any]) -> dict[str, Any]:
    spec = pod_spec(workload)
    assert spec is not None
    (container,) = spec["containers"]
    return dict(container)


def _config(objects: list[dict[str, Any]]) -> dict[str, str]:
    return dict(_one(objects, "ConfigMap", "phantomhub")["data"])


def _container_env(container: dict[str, Any]) -> dict[str, str]:
    return {entry["name"]: entry["value"] for entry in container.get("env", []) if "value" in entry}


def _process_env(objects: list[dict[str, Any]], container: dict[str, Any]) -> dict[str, str]:
    """The variables the container's process sees, less the Secret's: the image's ENV, then the
    ConfigMap (envFrom), then the container's own `env` (Kubernetes' precedence)."""
    return {**_image_env(), **_config(objects), **_container_env(container)}


def _image_env() -> dict[str, str]:
    """The runtime stage's ENV instructions (continuation lines joined)."""
    runtime = _stages()["runtime"].replace("\\\n", " ")
    env: dict[str, str] = {}
    for line in re.findall(r"^ENV (.*)$", runtime, re.M):
        env.update(re.findall(r"(\w+)=(\S+)", line))
    return env


def _settings_reads() -> set[str]:
    """Every PHANTOMHUB_* variable the server's code reads: calls of phantomhub/env.py's readers and
    of os.environ / os.getenv with a literal name in phantomhub/ and deploy/*.py (the demo, which
    sets the agent's variables, and the test settings left out), and ${...} in deploy/entrypoint.sh."""
    env_py = ast.parse((ROOT / "phantomhub" / "env.py").read_text())
    readers = {node.name for node in env_py.body if isinstance(node, ast.FunctionDef) and node.name.startswith("env_")}
    sources = [
        path for path in (ROOT / "phantomhub").rglob("*.py") if "demo" not in path.parts and path.name != "settings_test.py"
    ] + sorted((ROOT / "deploy").glob("*.py"))
    names: set[str] = set()
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                func = node.func
                called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                environ = (called in ("get", "getenv") and "environ" in ast.unparse(func)) or called == "getenv"
                if called in readers or environ:
                    names.add(str(node.args[0].value))
            elif (
                isinstance(node, ast.Subscript)
                and isinstance(node.ctx, ast.Load)
                and ast.unparse(node.value) == "os.environ"
                and isinstance(node.slice, ast.Constant)
            ):
                names.add(str(node.slice.value))
    names |= set(re.findall(r"\$\{(PHANTOMHUB_[A-Z_]+)", (ROOT / "deploy" / "entrypoint.sh").read_text()))
    return {name for name in names if name.startswith("PHANTOMHUB_")}


def _docs_section() -> str:
    section = re.search(r"^## On Kubernetes$(.*?)(?=^## )", DOCS, re.M | re.S)
    assert section is not None, "docs/deployment.md has no section 'On Kubernetes'"
    return section.group(1)


def _documented_secret_keys() -> set[str]:
    """The keys the docs' `kubectl create secret generic phantomhub` command puts in the Secret."""
    command = re.search(r"create secret generic phantomhub \\\n((?:\s+--from-literal=\S+.*\n)+)", _docs_section())
    assert command is not None, "docs/deployment.md lost its `kubectl create secret generic phantomhub` command"
    return set(re.findall(r"--from-literal=(PHANTOMHUB_[A-Z_]+)=", command.group(1)))


# --- the renderer itself: a check that cannot fail proves nothing -------------------------------


def test_the_renderer_merges_as_kubernetes_does_and_refuses_what_it_does_not_know(tmp_path: Path) -> None:
    original = {
        "spec": {
            "containers": [{"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}], "args": ["p", "q"]}],
            "keep": 1,
            "drop": 2,
        }
    }
    patch = {
        "spec": {"containers": [{"name": "a", "env": [{"name": "Y", "value": "3"}], "args": ["r"]}, {"name": "b"}], "drop": None}
    }
    merged = strategic_merge(original, patch)
    (first, second) = merged["spec"]["containers"]
    assert first["env"] == [{"name": "X", "value": "1"}, {"name": "Y", "value": "3"}]  # merged by name
    assert first["args"] == ["r"] and second == {"name": "b"}  # args replaced; a new container added
    assert merged["spec"]["keep"] == 1 and "drop" not in merged["spec"]  # null removes a key
    assert original["spec"]["drop"] == 2  # the original is left alone
    with pytest.raises(RenderError, match="'ports'"):
        strategic_merge({"ports": [{"containerPort": 1}]}, {"ports": [{"containerPort": 2}]}, "ports")
    (tmp_path / "kustomization.yaml").write_text("resources: []\ncommonLabels: {a: b}\n")
    with pytest.raises(RenderError, match="commonLabels"):
        render(tmp_path)
    (tmp_path / "kustomization.yaml").write_text("resources: [../elsewhere.yaml]\n")
    with pytest.raises(RenderError, match="outside"):
        render(tmp_path)
    assert image_name("registry.example.com:5000/team/phantomhub:0.1.0") == "registry.example.com:5000/team/phantomhub"
    assert image_name("phantomhub@sha256:abc") == "phantomhub"


def test_every_patch_image_and_replica_count_of_the_overlays_lands_somewhere(tmp_path: Path) -> None:
    for overlay in OVERLAYS:
        spec = yaml.safe_load((overlay / "kustomization.yaml").read_text())
        assert spec["resources"][0] == "../../base" and set(spec["resources"]) <= {"../../base", "../../base/node-collector"}
        objects = render(overlay)  # raises on a patch, image or count that matches nothing
        for image in spec.get("images", []):
            assert any(image["newName"] in c["image"] for o in objects for c in (pod_spec(o) or {}).get("containers", [])), image
    typo = tmp_path / "typo"
    typo.mkdir()
    (typo / "kustomization.yaml").write_text(
        f"resources: [{os.path.relpath(BASE, typo)}]\nimages: [{{name: phantomhb, newTag: '1'}}]\n"
    )
    with pytest.raises(RenderError, match="no container runs phantomhb"):
        render(typo)


# --- the Kubernetes schemas ----------------------------------------------------------------------


# The edit loop (`make check`) validates the oldest and the newest version; `make test` every one.
VERSIONS_MARKED = [v if v in (VERSIONS[0], VERSIONS[-1]) else pytest.param(v, marks=pytest.mark.slow) for v in VERSIONS]


@pytest.mark.parametrize("version", VERSIONS_MARKED)
@pytest.mark.parametrize("directory", [*_kustomizations(), COLLECTOR], ids=lambda path: str(path.relative_to(KUBERNETES)))
def test_every_object_is_valid_for_the_kubernetes_versions_the_docs_name(directory: Path, version: str) -> None:
    objects = render(directory)
    assert objects
    for obj in objects:
        try:
            validated = kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(part) for part in exc.path)
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} is not valid Kubernetes {version}: {where}: {exc.message}")
        assert validated == version  # the package ships this version's schemas: none was skipped


def test_strict_validation_refuses_an_unknown_field() -> None:
    web = _one(render(BASE), "Deployment", "phantomhub-web")
    _main_container(web)  # the shape the next line relies on
    web["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["hots"] = "typo"
    with pytest.raises(kubernetes_validate.ValidationError, match="hots"):
        kubernetes_validate.validate(web, VERSIONS[-1], strict=True)


def test_the_docs_name_the_versions_validated_and_the_package_has_their_schemas() -> None:
    found = re.search(r"Kubernetes (1\.\d+) to (1\.\d+)", _docs_section())
    assert found is not None, "docs/deployment.md, 'On Kubernetes', names no versions"
    first, last = (int(v.split(".")[1]) for v in found.groups())
    assert tuple(f"1.{minor}" for minor in range(first, last + 1)) == VERSIONS
    shipped = {re.sub(r"^(\d+\.\d+).*", r"\1", v) for v in kubernetes_validate.utils.all_versions()}
    assert set(VERSIONS) <= shipped


# --- the objects hang together -------------------------------------------------------------------


@pytest.mark.parametrize("directory", _kustomizations(), ids=lambda path: str(path.relative_to(KUBERNETES)))
def test_selectors_services_and_autoscaling_point_at_what_exists(directory: Path) -> None:
    objects = render(directory)
    for obj in objects:
        spec = pod_spec(obj)
        if spec is not None and obj["kind"] != "Job":
            labels = obj["spec"]["template"]["metadata"]["labels"]
            assert obj["spec"]["selector"]["matchLabels"].items() <= labels.items(), obj["metadata"]["name"]
    # no workload's selector takes another's pods (it would count them, or scale them away)
    workloads = [obj for obj in objects if obj["kind"] in ("Deployment", "DaemonSet")]
    for owner in workloads:
        for other in objects:
            if other is not owner and pod_spec(other) is not None:
                other_labels = other["spec"]["template"]["metadata"]["labels"].items()
                assert not owner["spec"]["selector"]["matchLabels"].items() <= other_labels, (
                    owner["metadata"]["name"],
                    other["metadata"]["name"],
                )
    web = _one(objects, "Deployment", "phantomhub-web")
    web_labels = web["spec"]["template"]["metadata"]["labels"].items()
    service = _one(objects, "Service", "phantomhub")
    assert service["spec"]["selector"].items() <= web_labels
    (port,) = service["spec"]["ports"]
    assert port["targetPort"] in {p["name"] for p in _main_container(web)["ports"]}
    hpa = _one(objects, "HorizontalPodAutoscaler", "phantomhub-web")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "phantomhub-web"}
    assert "replicas" not in web["spec"], "the autoscaler owns web's count; a count here resets it at every apply"
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    assert "cpu" in _main_container(web)["resources"]["requests"]  # utilization is of the request
    pdb = _one(objects, "PodDisruptionBudget", "phantomhub-web")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= web_labels
    (spread,) = pod_spec(web)["topologySpreadConstraints"]  # type: ignore[index]
    assert spread["topologyKey"] == "kubernetes.io/hostname" and spread["labelSelector"]["matchLabels"].items() <= web_labels
    assert pdb["spec"]["minAvailable"] < hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]  # a drain can proceed
    ingress = _one(objects, "Ingress", "phantomhub")
    backends = [path["backend"]["service"] for rule in ingress["spec"]["rules"] for path in rule["http"]["paths"]]
    assert backends and all(b == {"name": "phantomhub", "port": {"name": port["name"]}} for b in backends)
    claims = {obj["metadata"]["name"] for obj in objects if obj["kind"] == "PersistentVolumeClaim"}
    for obj in objects:
        for volume in (pod_spec(obj) or {}).get("volumes", []):
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims
    namespaces = {obj["metadata"].get("namespace") for obj in objects}
    if directory != BASE:
        assert namespaces == {yaml.safe_load((directory / "kustomization.yaml").read_text())["namespace"]}


def test_the_node_collector_beside_the_base_is_the_one_of_docs_node_collector_md_sending_to_the_service() -> None:
    objects = render(BASE)
    ds = _collector(objects)
    standalone = yaml.safe_load((ROOT / "deploy" / "node-collector" / "daemonset.yaml").read_text())
    collector = _main_container(ds)
    env = {entry["name"]: entry for entry in collector["env"]}
    server = urlparse(env["PHANTOMHUB_SERVER"]["value"])
    service = _one(objects, "Service", "phantomhub")
    assert (
        server.scheme == "http"
        and server.hostname == service["metadata"]["name"]
        and server.port == service["spec"]["ports"][0]["port"]
    )
    # the rest is the standalone file as it is (tests/agent/test_node_deploy.py holds it to the collector)
    env.pop("PHANTOMHUB_SERVER")
    original = _main_container(standalone)
    assert env == {entry["name"]: entry for entry in original["env"] if entry["name"] != "PHANTOMHUB_SERVER"}
    assert {k: v for k, v in collector.items() if k != "env"} == {k: v for k, v in original.items() if k != "env"}
    pods = [{k: v for k, v in (pod_spec(obj) or {}).items() if k != "containers"} for obj in (ds, standalone)]
    assert pods[0] == pods[1] and pods[0]["hostPID"] is True
    assert "nvidia.com/gpu" not in collector["resources"].get("limits", {})  # it takes no GPU from the jobs
    for overlay in OVERLAYS:  # the example runs it (docs/deployment.md, step 8)
        namespace = yaml.safe_load((overlay / "kustomization.yaml").read_text())["namespace"]
        assert _one(render(overlay), "DaemonSet", "phantomhub-node-collector")["metadata"]["namespace"] == namespace


# --- the objects against the code ----------------------------------------------------------------


def test_each_role_runs_the_images_entrypoint_with_the_role_compose_gives_it() -> None:
    objects = render(BASE)
    runtime = _stages()["runtime"]
    assert 'ENTRYPOINT ["/app/deploy/entrypoint.sh"]' in runtime
    services = COMPOSE["services"]
    for role, workload in _app_workloads(objects).items():
        container = _main_container(workload)
        assert "command" not in container, f"{role}: the image's ENTRYPOINT must run (deploy/entrypoint.sh picks the role)"
        assert container["args"] == services[role]["command"] == [role], role
        _entrypoint_role(role)
        assert image_name(container["image"]) == "phantomhub"
    assert 'exec gunicorn phantomhub.wsgi --config "$here/gunicorn.py"' in _entrypoint_role("web")
    assert "exec celery -A phantomhub worker" in _entrypoint_role("worker")
    assert "exec celery -A phantomhub beat" in _entrypoint_role("beat")
    assert "exec python -m django migrate --no-input" in _entrypoint_role("migrate")
    # `celery -A phantomhub` finds the project's Celery app, phantomhub.celery's
    from celery.app.utils import find_app

    from phantomhub.celery import app

    assert find_app("phantomhub") is app


def test_only_the_migration_job_migrates_and_every_other_role_waits_for_it() -> None:
    workloads = _app_workloads(render(BASE))
    job = workloads.pop("migrate")
    job_pod = pod_spec(job)
    assert job_pod is not None and job_pod["restartPolicy"] == "Never" and "initContainers" not in job_pod
    for role, workload in workloads.items():
        spec = pod_spec(workload)
        assert spec is not None
        (gate,) = spec["initContainers"]
        assert gate["image"] == _main_container(workload)["image"], f"{role}: the gate must check the migrations of its own image"
        assert "command" not in gate and gate["args"][:2] == ["sh", "-c"]
        loop = r"until python -m django migrate --check --no-input > /dev/null; do .*; sleep \d+; done"
        assert re.fullmatch(loop, gate["args"][2]), gate["args"]
        assert gate["envFrom"] == _main_container(workload)["envFrom"]  # the same database
        assert "migrate" not in _main_container(workload)["args"]
    # beat must be one process, and neither it nor the worker runs old code beside new migrations
    assert workloads["beat"]["spec"]["replicas"] == 1
    assert workloads["beat"]["spec"]["strategy"] == {"type": "Recreate"}
    assert workloads["worker"]["spec"]["strategy"] == {"type": "Recreate"}
    assert workloads["web"]["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


@pytest.mark.parametrize("directory", _kustomizations(), ids=lambda path: str(path.relative_to(KUBERNETES)))
def test_the_web_port_and_probes_are_the_ones_gunicorn_binds_and_django_answers(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = render(directory)
    web = _main_container(_one(objects, "Deployment", "phantomhub-web"))
    env = _process_env(objects, web)
    for name in list(os.environ):
        if name.startswith("PHANTOMHUB_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    gunicorn = runpy.run_path(str(ROOT / "deploy" / "gunicorn.py"))
    (port,) = web["ports"]
    assert gunicorn["bind"] == f"0.0.0.0:{port['containerPort']}"
    assert f"EXPOSE {port['containerPort']}" in _stages()["runtime"]
    assert gunicorn["workers"] == int(env["PHANTOMHUB_WEB_WORKERS"])
    # a pod stopping gets preStop's pause and then gunicorn's whole graceful shutdown
    from gunicorn.config import GracefulTimeout

    graceful = gunicorn.get("graceful_timeout", GracefulTimeout.default)
    (pause,) = (int(arg) for arg in web["lifecycle"]["preStop"]["exec"]["command"][1:])
    assert pod_spec(_one(objects, "Deployment", "phantomhub-web"))["terminationGracePeriodSeconds"] > pause + graceful  # type: ignore[index]
    allowed_hosts = env["PHANTOMHUB_ALLOWED_HOSTS"].split(",")
    for probe in (web["readinessProbe"], web["livenessProbe"]):
        get = probe["httpGet"]
        assert get["port"] == port["name"] and get.get("scheme", "HTTP") == "HTTP"
        assert resolve(get["path"]).url_name == "health"
        assert get["path"] == _healthcheck().PATH  # the container healthcheck's, in compose
        # answered on plain http whatever PHANTOMHUB_SSL_REDIRECT says
        assert any(re.search(pattern, get["path"].lstrip("/")) for pattern in settings.SECURE_REDIRECT_EXEMPT)
        (host,) = (h["value"] for h in get["httpHeaders"] if h["name"] == "Host")
        assert validate_host(host, allowed_hosts), f"Django would answer the probe's Host {host!r} with 400"
        assert probe["timeoutSeconds"] < probe["periodSeconds"]
    # the liveness probe gives up later than readiness: a short database outage only takes pods out
    ready, live = web["readinessProbe"], web["livenessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] > ready["periodSeconds"] * ready["failureThreshold"]


@pytest.mark.parametrize("directory", _kustomizations(), ids=lambda path: str(path.relative_to(KUBERNETES)))
def test_the_environment_names_only_settings_the_code_reads_and_secrets_stay_in_the_secret(directory: Path) -> None:
    objects = render(directory)
    reads = _settings_reads()
    assert {
        "PHANTOMHUB_SECRET_KEY",
        "PHANTOMHUB_ALLOWED_HOSTS",
        "PHANTOMHUB_WEB_WORKERS",
        "PHANTOMHUB_WORKER_CONCURRENCY",
    } <= reads
    config = _config(objects)
    assert set(config) <= reads, f"not settings: {sorted(set(config) - reads)}"
    assert not set(config) & SECRET_SETTINGS, "secrets belong in the Secret, not the ConfigMap"
    for role, workload in _app_workloads(objects).items():
        spec = pod_spec(workload)
        assert spec is not None
        for container in spec["containers"] + spec.get("initContainers", []):
            assert container["envFrom"] == [{"configMapRef": {"name": "phantomhub"}}, {"secretRef": {"name": "phantomhub"}}], role
            names = {entry["name"] for entry in container.get("env", [])}
            assert names <= reads, f"{role}: not settings: {sorted(names - reads)}"
            assert not names & SECRET_SETTINGS
    for role, name in (("web", "PHANTOMHUB_WEB_WORKERS"), ("worker", "PHANTOMHUB_WORKER_CONCURRENCY")):
        container = _main_container(_app_workloads(objects)[role])
        assert name in _container_env(container), f"{role}'s process count is set beside the CPU it is sized for"
    # The Secret the docs make holds the required settings, and only settings.
    keys = _documented_secret_keys()
    assert REQUIRED_SECRETS <= keys <= SECRET_SETTINGS & reads, keys


@pytest.mark.parametrize("directory", _kustomizations(), ids=lambda path: str(path.relative_to(KUBERNETES)))
def test_the_public_host_is_one_django_answers_with_https_origins_and_links(directory: Path) -> None:
    objects = render(directory)
    config = _config(objects)
    ingress = _one(objects, "Ingress", "phantomhub")
    hosts = [rule["host"] for rule in ingress["spec"]["rules"]]
    (tls,) = ingress["spec"]["tls"]
    assert tls["hosts"] == hosts and tls["secretName"]
    allowed = config["PHANTOMHUB_ALLOWED_HOSTS"].split(",")
    origins = config["PHANTOMHUB_CSRF_TRUSTED_ORIGINS"].split(",")
    for host in hosts:
        assert validate_host(host, allowed)
        assert f"https://{host}" in origins
    assert urlparse(config["PHANTOMHUB_PUBLIC_URL"]).netloc in hosts and config["PHANTOMHUB_PUBLIC_URL"].startswith("https://")
    body = ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-body-size"]
    assert int(body.removesuffix("m")) * 2**20 >= settings.MAX_BODY_BYTES
    # in-cluster clients (the probes, the node collector) speak http to the Service: no redirect
    assert config["PHANTOMHUB_SSL_REDIRECT"] == "0"
    collector = _main_container(_collector(objects))
    server = next(entry["value"] for entry in collector["env"] if entry["name"] == "PHANTOMHUB_SERVER")
    assert validate_host(urlparse(server).hostname or "", allowed)
    for entry in config.get("PHANTOMHUB_TRUSTED_PROXIES", "").split(","):
        if entry:
            assert ipaddress.ip_network(entry).is_private  # the cluster's pod network, never the internet


@pytest.mark.parametrize("directory", _kustomizations(), ids=lambda path: str(path.relative_to(KUBERNETES)))
def test_pods_run_as_the_images_user_read_only_with_a_volume_for_every_path_the_service_writes(directory: Path) -> None:
    objects = render(directory)
    uid = re.search(r"useradd .*--uid (\d+) phantomhub", DOCKERFILE)
    assert uid is not None
    config = _config(objects)
    for role, workload in _app_workloads(objects).items():
        spec = pod_spec(workload)
        assert spec is not None
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == int(uid.group(1))
        assert spec["automountServiceAccountToken"] is False
        # the rest of the "restricted" Pod Security Standard: nothing of the host, the runtime's seccomp
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not {"hostPID", "hostIPC", "hostNetwork"} & set(spec)
        assert all(set(volume) & {"emptyDir", "persistentVolumeClaim"} for volume in spec["volumes"])
        volumes = {volume["name"]: volume for volume in spec["volumes"]}
        for container in spec["containers"] + spec.get("initContainers", []):
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
            assert security["capabilities"] == {"drop": ["ALL"]}
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]) and "memory" in resources["limits"], (role, container["name"])
            mounts = {mount["mountPath"]: volumes[mount["name"]] for mount in container["volumeMounts"]}
            assert "emptyDir" in mounts["/tmp"]  # tempfile's directory: exports, archive files, gunicorn's heartbeats
        mounts = {mount["mountPath"]: volumes[mount["name"]] for mount in _main_container(workload)["volumeMounts"]}
        if role in ("web", "worker", "beat"):
            var_dir = _process_env(objects, _main_container(workload))["PHANTOMHUB_VAR_DIR"]
            assert "emptyDir" in mounts[var_dir], role  # beat's schedule, the sweeper's lock
        if role == "web":  # gunicorn's control socket goes in the user's home
            assert re.search(r"useradd .*--create-home .*phantomhub$", DOCKERFILE, re.M)  # /home/phantomhub
            assert "emptyDir" in mounts["/home/phantomhub"]
        if role in ("web", "worker"):  # the worker writes the archive, web streams from it
            assert "persistentVolumeClaim" in mounts[config["PHANTOMHUB_ARCHIVE_URL"]], role
            assert spec["securityContext"]["fsGroup"] == int(uid.group(1))


def test_resources_follow_the_sizing_table() -> None:
    workloads = _app_workloads(render(BASE))
    scaling = " ".join((ROOT / "docs" / "scaling.md").read_text().split())
    # docs/scaling.md, "Sizing": web workers and Celery concurrency at about 2 per core, and 1,000
    # live 8-rank runs cost about 0.45 of a core of each, which one pod's request carries
    assert "web workers and Celery concurrency at about 2 per core" in scaling
    assert "about 0.45 of a core of web, 0.45 of analysis workers" in scaling
    for role, name in (("web", "PHANTOMHUB_WEB_WORKERS"), ("worker", "PHANTOMHUB_WORKER_CONCURRENCY")):
        container = _main_container(workloads[role])
        cores = float(container["resources"]["limits"]["cpu"])
        assert int(_container_env(container)[name]) == 2 * cores, role
        assert container["resources"]["requests"]["cpu"] == "500m", role
    web = _main_container(workloads["web"])
    # docs/performance.md: a worker idles at 141 MiB and the largest request adds at most 223 MiB
    workers = int(_container_env(web)["PHANTOMHUB_WEB_WORKERS"])
    assert workers * 141 <= _mib(web["resources"]["requests"]["memory"])
    assert workers * (141 + 223) <= _mib(web["resources"]["limits"]["memory"])


def _mib(quantity: str) -> int:
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", quantity).groups()  # type: ignore[union-attr]
    return int(number) * (1024 if unit == "Gi" else 1)


def test_worker_and_beat_are_checked_as_compose_checks_them() -> None:
    workloads = _app_workloads(render(BASE))
    for role in ("worker", "beat"):
        probe = _main_container(workloads[role])["livenessProbe"]
        assert probe["exec"]["command"] == COMPOSE["services"][role]["healthcheck"]["test"][1:], role
        assert probe["timeoutSeconds"] >= _healthcheck().WORKER_PING_TIMEOUT_S
    # the worker's node name is the one its check pings: Kubernetes sets HOSTNAME to the pod's name
    assert '--hostname "celery@${HOSTNAME:-%h}"' in _entrypoint_role("worker")


def test_the_docs_walk_through_files_and_commands_that_exist() -> None:
    section = _docs_section()
    made = set(re.findall(r"cp -r \S+ (\S+)`", section))  # the copy the reader makes of the example
    assert made
    for path in set(re.findall(r"deploy/kubernetes/[\w./-]+[\w/]", section)) - made:
        assert (ROOT / path).exists(), path
    assert "kubectl apply -k deploy/kubernetes/overlays/example" in section
    assert "delete job phantomhub-migrate" in section  # a Job's template cannot change
    for name in ("phantomhub-web", "phantomhub-worker", "phantomhub-beat", "phantomhub-migrate", "phantomhub-node-collector"):
        assert name in section, name
    assert "createnodetoken" in section and "phantomhub-node-token" in section


# --- the containers' commands, run ---------------------------------------------------------------


# A path nobody, root included, can create: what the pod's read-only root filesystem is to it.
READ_ONLY = "/proc/phantomhub-read-only-root"


def _run_env(tmp: Path, objects: list[dict[str, Any]], container: dict[str, Any]) -> dict[str, str]:
    """The container's environment on this machine, with its filesystem as in the pod: each path it
    mounts (an emptyDir, the archive claim) is a directory under tmp, and the image's own paths
    (its home, /tmp, /app/var) cannot be written unless mounted; the ConfigMap, its env and a
    Secret's values; this virtual environment's tools and this checkout's code."""
    mounts = {mount["mountPath"] for mount in container.get("volumeMounts", [])}

    def place(path: str) -> str:
        if path not in mounts:
            return f"{READ_ONLY}{path}"
        local = tmp / path.strip("/").replace("/", "-")
        local.mkdir(parents=True, exist_ok=True)
        return str(local)

    process = _process_env(objects, container)
    base = {k: v for k, v in os.environ.items() if not k.startswith("PHANTOMHUB_") and k != "DJANGO_SETTINGS_MODULE"}
    base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}"
    base["PYTHONPATH"] = str(ROOT)
    base["HOME"] = place("/home/phantomhub")
    base["TMPDIR"] = place("/tmp")
    secret = {
        "PHANTOMHUB_SECRET_KEY": secrets.token_urlsafe(48),
        "PHANTOMHUB_DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
        "PHANTOMHUB_OIDC_CLIENT_SECRET": secrets.token_urlsafe(24),  # the example overlay signs in through its provider
    }
    return {
        **base,
        **process,
        **secret,
        "PHANTOMHUB_VAR_DIR": place(process["PHANTOMHUB_VAR_DIR"]),
        "PHANTOMHUB_ARCHIVE_URL": place(process["PHANTOMHUB_ARCHIVE_URL"]),
    }


def test_check_deploy_finds_only_what_the_docs_say_the_kubernetes_settings_leave_on_purpose(tmp_path: Path) -> None:
    objects = render(OVERLAYS[0])
    env = _run_env(tmp_path, objects, _main_container(_one(objects, "Deployment", "phantomhub-web")))
    env |= {"PHANTOMHUB_DATABASE_URL": "postgres://u@127.0.0.1:5432/db", "PHANTOMHUB_METRICS_TOKEN": secrets.token_urlsafe(32)}
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    found = set(re.findall(r"\((security\.\w+)\)", done.stdout + done.stderr))
    # no https redirect (the Ingress redirects; in-cluster clients speak http), and HSTS for the
    # host alone: its subdomains and the browsers' preload list are each site's to decide
    assert found == {"security.W008", "security.W005", "security.W021"}, done.stdout + done.stderr
    for code in found:
        assert code.removeprefix("security.") in _docs_section(), code


@pytest.mark.slow
def test_the_gate_waits_for_the_migration_job_and_then_lets_the_role_start(tmp_path: Path) -> None:
    objects = render(OVERLAYS[0])
    workloads = _app_workloads(objects)
    web = pod_spec(workloads["web"])
    assert web is not None
    (gate,) = web["initContainers"]
    env = _run_env(tmp_path, objects, gate)
    entrypoint = str(ROOT / "deploy" / "entrypoint.sh")
    waiting = subprocess.Popen(
        [entrypoint, *gate["args"]],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            waiting.wait(timeout=8)  # an empty database: the gate holds the role back
    finally:
        os.killpg(waiting.pid, signal.SIGTERM)
    output = waiting.communicate(timeout=10)[0] or ""
    assert "waiting for the migration Job (phantomhub-migrate)" in output, output
    job = _main_container(workloads["migrate"])
    assert job["envFrom"] == gate["envFrom"] and "env" not in job  # the same settings, the same database
    done = subprocess.run([entrypoint, *job["args"]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    passed = subprocess.run([entrypoint, *gate["args"]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert passed.returncode == 0 and "waiting" not in passed.stdout, passed.stdout + passed.stderr


def _probe_command(command: list[str]) -> list[str]:
    """An exec probe's command as this machine runs it: the image's /app/deploy is deploy/ here."""
    return [
        sys.executable if command[0] == "python" else command[0],
        *(a.replace("/app/deploy/", f"{ROOT}/deploy/") for a in command[1:]),
    ]


@pytest.mark.celery
def test_worker_and_beat_start_with_the_pods_filesystem_and_pass_their_liveness_probes(tmp_path: Path) -> None:
    objects = render(OVERLAYS[0])
    workloads = _app_workloads(objects)
    entrypoint = str(ROOT / "deploy" / "entrypoint.sh")
    job = _main_container(workloads["migrate"])
    database = _run_env(tmp_path, objects, job)["PHANTOMHUB_DATABASE_URL"]
    migrated = subprocess.run(
        [entrypoint, *job["args"]],
        cwd=tmp_path,
        env=_run_env(tmp_path, objects, job),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    broker = os.environ.get("PHANTOMHUB_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    started: list[subprocess.Popen[bytes]] = []
    try:
        for role in ("worker", "beat"):
            container = _main_container(workloads[role])
            env = _run_env(tmp_path / role, objects, container) | {
                "PHANTOMHUB_DATABASE_URL": database,
                "PHANTOMHUB_REDIS_URL": broker,
                "HOSTNAME": f"k8s-test-{role}-{os.getpid()}",  # Kubernetes sets the pod's name; no other worker answers for it
                "PHANTOMHUB_SWEEP_INTERVAL_S": "3600",  # beat sends little into the suite's broker meanwhile
                "PHANTOMHUB_ALERT_INTERVAL_S": "3600",
            }
            probe = _probe_command(container["livenessProbe"]["exec"]["command"])
            assert subprocess.run(probe, env=env, capture_output=True, timeout=60).returncode == 1  # not running yet
            with (tmp_path / f"{role}.log").open("wb") as log:
                started.append(
                    subprocess.Popen(
                        [entrypoint, *container["args"]], cwd=tmp_path, env=env, stdout=log, stderr=log, start_new_session=True
                    )
                )
            deadline = time.monotonic() + 90
            while subprocess.run(probe, env=env, capture_output=True, timeout=60).returncode != 0:
                assert started[-1].poll() is None, (tmp_path / f"{role}.log").read_text()
                assert time.monotonic() < deadline, (
                    f"{role}'s liveness probe never passed: {(tmp_path / f'{role}.log').read_text()}"
                )
                time.sleep(1)
        for role in ("worker", "beat"):
            text = (tmp_path / f"{role}.log").read_text()
            assert "Traceback" not in text and "Read-only" not in text and "ERROR" not in text, text
    finally:
        for process in started:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)
        import redis

        redis.Redis.from_url(broker).flushdb()  # what beat sent is for no other test


def _get(port: int, path: str, headers: dict[str, str], method: str = "GET") -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request(method, path, body=b"{}" if method == "POST" else None, headers=headers)
    answer = connection.getresponse()
    answer.read()
    connection.close()
    return answer


@pytest.fixture(scope="module")
def web_pod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, dict[str, Any], list[dict[str, Any]], Path]]:
    """gunicorn as the example overlay's web container runs it (deploy/gunicorn.py, its ConfigMap and
    env), on 127.0.0.1 and a free port instead of the pod's 0.0.0.0:8000."""
    tmp = tmp_path_factory.mktemp("web-pod")
    objects = render(OVERLAYS[0])
    container = _main_container(_one(objects, "Deployment", "phantomhub-web"))
    port = free_port()
    redis = os.environ.get("PHANTOMHUB_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")  # a broker: no in-process sweeper
    env = _run_env(tmp, objects, container) | {"PHANTOMHUB_REDIS_URL": redis}
    log = (tmp / "gunicorn.log").open("wb")
    # deploy/entrypoint.sh's web role, bound to loopback and with one worker for the test
    argv = [sys.executable, "-m", "gunicorn", "phantomhub.wsgi", "--config", "deploy/gunicorn.py"]
    argv += ["--bind", f"127.0.0.1:{port}", "--workers", "1"]
    server = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            if server.poll() is not None:
                raise RuntimeError((tmp / "gunicorn.log").read_text())
            try:
                _get(port, "/api/v1/health", {"Host": "phantomhub"})
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield port, container, objects, tmp / "gunicorn.log"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)
        log.close()


@pytest.mark.live_server
def test_gunicorn_answers_the_kubelets_probes_and_the_node_collector(
    web_pod: tuple[int, dict[str, Any], list[dict[str, Any]], Path],
) -> None:
    port, container, objects, log = web_pod
    for probe in (container["readinessProbe"], container["livenessProbe"]):
        get = probe["httpGet"]
        headers = {h["name"]: h["value"] for h in get["httpHeaders"]}
        assert _get(port, get["path"], headers).status == 200
    # without the Host header the kubelet would send the pod's address, which Django refuses
    assert _get(port, "/api/v1/health", {"Host": f"10.244.1.17:{port}"}).status == 400
    # the node collector's requests reach the API over plain http (401 without a token, not a
    # redirect to https and not a refused Host)
    collector = _main_container(_one(objects, "DaemonSet", "phantomhub-node-collector"))
    server = urlparse(next(entry["value"] for entry in collector["env"] if entry["name"] == "PHANTOMHUB_SERVER"))
    answer = _get(port, "/api/v1/nodes/samples", {"Host": server.netloc, "Content-Type": "application/json"}, method="POST")
    assert answer.status == 401, answer.status
    # the public host is answered too, as the Ingress forwards it
    public = urlparse(_config(objects)["PHANTOMHUB_PUBLIC_URL"]).netloc
    assert _get(port, "/api/v1/health", {"Host": public}).status == 200
    # and it started clean: nothing it needed to write was missing (its home, /tmp, its var/)
    assert "[ERROR]" not in log.read_text(), log.read_text()
