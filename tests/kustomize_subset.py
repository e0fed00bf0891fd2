"""Renders a kustomization the way `kubectl apply -k` does, for the subset deploy/kubernetes uses.

Neither kubectl nor kustomize is on the test machines, so tests/test_kubernetes_manifests.py renders
the base and the overlays with this: `resources` (files, and directories holding a kustomization),
`namespace`, `images`, `replicas` and `patches` (strategic merge, each with an explicit `target`).
Anything else in a kustomization, or a list in a patch whose merge rule is not written down here,
is refused with a message naming it, so a manifest can never use a feature this renderer would
silently get wrong. It is stricter than kustomize in one way: an `images` or `replicas` entry that
matches nothing is an error here (kustomize ignores it), so a typo cannot pass.

Strategic merge, as Kubernetes defines it for the built-in kinds: maps merge key by key (a null
value removes the key); lists with a patch merge key (`containers` by `name`, `volumeMounts` by
`mountPath`, ...) merge item by item, every other list is replaced whole.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

KNOWN_FIELDS = {"apiVersion", "kind", "resources", "namespace", "images", "replicas", "patches"}

# Lists that merge item by item, by this key (the patchMergeKey of the Kubernetes API types).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
}
# Lists with no merge key in the API types: a patch replaces them whole.
REPLACED = {
    "args",
    "command",
    "tls",
    "rules",
    "hosts",
    "paths",
    "tolerations",
    "httpHeaders",
    "metrics",
    "accessModes",
    "envFrom",
}

# Kinds whose pods' containers `images` rewrites, and where their pod spec is.
POD_SPEC_PATHS = {
    "Deployment": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
SCALABLE = {"Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"}
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PersistentVolume",
    "StorageClass",
}


class RenderError(Exception):
    """The kustomization uses something this renderer does not implement, or does not add up."""


def render(directory: Path) -> list[dict[str, Any]]:
    """The objects `kubectl apply -k directory` would send (in the order of the resources)."""
    directory = directory.resolve()
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = sorted(set(spec) - KNOWN_FIELDS)
    if unknown:
        raise RenderError(f"{directory}/kustomization.yaml: {unknown[0]} is not implemented by tests/kustomize_subset.py")
    objects: list[dict[str, Any]] = []
    for entry in spec.get("resources", []):
        objects += _resource(directory, entry)
    for patch in spec.get("patches", []):
        _patch(directory, objects, patch)
    if "namespace" in spec:
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = spec["namespace"]
    for replicas in spec.get("replicas", []):
        _replicas(objects, replicas)
    for image in spec.get("images", []):
        _image(objects, image)
    return objects


def _resource(directory: Path, entry: str) -> list[dict[str, Any]]:
    path = (directory / entry).resolve()
    if path.is_dir():
        return render(path)  # a kustomization anywhere, as kustomize allows
    if not path.is_relative_to(directory):  # kustomize's load restrictor refuses such files
        raise RenderError(f"{entry}: a file outside {directory} (kustomize refuses it; include its directory's kustomization)")
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _matches(obj: dict[str, Any], target: dict[str, Any]) -> bool:
    unknown = sorted(set(target) - {"kind", "name", "namespace", "group", "version"})
    if unknown:
        raise RenderError(f"a patch target's {unknown[0]} is not implemented by tests/kustomize_subset.py")
    group, _, version = obj["apiVersion"].rpartition("/")
    found = {
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "namespace": obj["metadata"].get("namespace"),
        "group": group,
        "version": version,
    }
    return all(found[key] == value for key, value in target.items())


def _patch(directory: Path, objects: list[dict[str, Any]], patch: dict[str, Any]) -> None:
    if "target" not in patch:
        raise RenderError(f"patch {patch}: give it a target (matching by the patch's own name is not implemented)")
    body = yaml.safe_load((directory / patch["path"]).read_text()) if "path" in patch else yaml.safe_load(patch["patch"])
    if not isinstance(body, dict):  # a JSON 6902 patch is a list of operations
        raise RenderError(f"patch {patch}: only strategic-merge patches are implemented")
    targets = [index for index, obj in enumerate(objects) if _matches(obj, patch["target"])]
    if not targets:
        raise RenderError(f"patch {patch.get('path', patch)}: no resource matches {patch['target']}")
    for index in targets:
        kept = {
            "apiVersion": objects[index]["apiVersion"],
            "kind": objects[index]["kind"],
            "name": objects[index]["metadata"]["name"],
        }
        merged = strategic_merge(objects[index], {key: value for key, value in body.items() if key not in ("apiVersion", "kind")})
        merged["metadata"]["name"] = kept["name"]  # with a target, the patch's own name is ignored
        objects[index] = merged


def strategic_merge(original: Any, patch: Any, field: str = "") -> Any:
    """`patch` merged into `original` (neither is changed) by the strategic-merge rules above."""
    if isinstance(patch, dict) and isinstance(original, dict):
        if any(key.startswith("$") for key in patch):
            raise RenderError(f"{field}: patch directives ($patch, $retainKeys, ...) are not implemented")
        merged = copy.deepcopy(original)
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            elif key in merged:
                merged[key] = strategic_merge(merged[key], value, key)
            else:
                merged[key] = copy.deepcopy(value)
        return merged
    if isinstance(patch, list):
        if field in REPLACED:
            return copy.deepcopy(patch)
        if field not in MERGE_KEYS:
            raise RenderError(f"a patch sets the list {field!r}: write down how kustomize merges it in tests/kustomize_subset.py")
        key = MERGE_KEYS[field]
        merged_list = copy.deepcopy(original) if isinstance(original, list) else []
        for item in patch:
            at = next((i for i, old in enumerate(merged_list) if old.get(key) == item[key]), None)
            if at is None:
                merged_list.append(copy.deepcopy(item))
            else:
                merged_list[at] = strategic_merge(merged_list[at], item, field)
        return merged_list
    return copy.deepcopy(patch)


def _replicas(objects: list[dict[str, Any]], replicas: dict[str, Any]) -> None:
    found = [obj for obj in objects if obj["kind"] in SCALABLE and obj["metadata"]["name"] == replicas["name"]]
    if not found:
        raise RenderError(f"replicas: nothing scalable is named {replicas['name']}")
    for obj in found:
        obj["spec"]["replicas"] = replicas["count"]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The pod spec of a workload (Deployment, DaemonSet, Job, ...), None for other kinds."""
    path = POD_SPEC_PATHS.get(obj["kind"])
    if path is None:
        return None
    spec: dict[str, Any] = obj
    for key in path:
        spec = spec[key]
    return spec


def image_name(image: str) -> str:
    """`registry:5000/team/app:1.2@sha256:...` without its tag and digest: what `images` matches."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def _image(objects: list[dict[str, Any]], image: dict[str, Any]) -> None:
    unknown = sorted(set(image) - {"name", "newName", "newTag", "digest"})
    if unknown:
        raise RenderError(f"images: {unknown[0]} is not implemented by tests/kustomize_subset.py")
    matched = False
    for obj in objects:
        spec = pod_spec(obj)
        for container in (spec or {}).get("containers", []) + (spec or {}).get("initContainers", []):
            old = container["image"]
            if image_name(old) != image["name"]:
                continue
            matched = True
            tag = old.split("@", 1)[0][len(image_name(old)) + 1 :] or None
            name = image.get("newName", image["name"])
            if "digest" in image:
                container["image"] = f"{name}@{image['digest']}"
            else:
                new_tag = image.get("newTag", tag)
                container["image"] = f"{name}:{new_tag}" if new_tag else name
    if not matched:
        raise RenderError(f"images: no container runs {image['name']}")
