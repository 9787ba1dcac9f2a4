"""Every Kubernetes manifest of the docs is a whole object the API's schema accepts, and its
``follow`` container works as the follow section says.

A ``yaml`` block is one or more whole objects (``apiVersion``, ``kind``), each checked
strictly (no unknown field) by ``kubernetes-validate`` against the newest schemas it
ships (offline). Then, in each pod (or pod template), a container that runs
``traceml-exporter follow``: its command line is one ``follow`` accepts, with every
stream; a probe on it targets its ``--metrics-port`` on a ``--metrics-host`` the
kubelet can reach (the pod's IP, not 127.0.0.1, the default); it runs as the same
user as the pod's other containers, and not as root; beside another container it
shares the pod's process namespace (``/proc`` must show the aggregator).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from doc_blocks import DOCS, Block, blocks
from traceml_exporter_sdk.cli import build_parser

FIXTURES = Path(__file__).parent / "fixtures"
VERSION = kubernetes_validate.latest_version()
PROBES = ("readinessProbe", "livenessProbe", "startupProbe")


def manifest_blocks(paths: tuple[Path, ...] | list[Path]) -> list[Block]:
    return [b for path in paths for b in blocks(path) if b.language == "yaml"]


def schema_problems(block: Block) -> list[str]:
    problems = []
    for obj in yaml.safe_load_all(block.text):
        if not isinstance(obj, dict) or not {"apiVersion", "kind"} <= obj.keys():
            problems.append("not a whole object: apiVersion and kind are missing")
            continue
        try:
            kubernetes_validate.validate(obj, VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            problems.append(f"{obj['kind']}: {where}: {exc.message}")
    return problems


def pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod spec of a Pod, or of a workload's pod template."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Pod":
        return [spec]
    template = spec.get("template") or spec.get("jobTemplate", {}).get("spec", {}).get("template")
    return [template["spec"]] if template else []


def _user(pod: dict[str, Any], container: dict[str, Any]) -> Any:
    own = (container.get("securityContext") or {}).get("runAsUser")
    return own if own is not None else (pod.get("securityContext") or {}).get("runAsUser")


def _is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def follow_problems(pod: dict[str, Any]) -> list[str]:
    problems = []
    containers = pod.get("containers", [])
    for container in containers:
        argv = [str(a) for a in (*container.get("command", []), *container.get("args", []))]
        if argv[:2] != ["traceml-exporter", "follow"]:
            continue
        name = container["name"]
        try:
            args = build_parser().parse_args(argv[1:])
        except SystemExit:
            problems.append(f"{name}: follow refuses the command line: {argv}")
            continue
        if args.streams != "all":
            problems.append(
                f"{name}: --streams {args.streams or 'not given (step_time)'}: a sidecar exports every stream"
            )
        ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
        for probe in PROBES:
            http = (container.get(probe) or {}).get("httpGet")
            if not http:
                continue
            port = ports.get(http["port"], http["port"])
            if port != args.metrics_port:
                problems.append(f"{name}: {probe} on {port}, /healthz is on {args.metrics_port}")
            elif _is_loopback(args.metrics_host):
                problems.append(
                    f"{name}: {probe} on --metrics-host {args.metrics_host}: the kubelet "
                    "probes the pod's IP and never reaches it"
                )
        users = {_user(pod, c) for c in containers}
        if _user(pod, container) in (None, 0) or len(users) > 1:
            problems.append(f"{name}: runAsUser {sorted(map(str, users))}: the training user's")
        if len(containers) > 1 and args.session_root and not pod.get("shareProcessNamespace"):
            problems.append(f"{name}: shareProcessNamespace: the aggregator's /proc is not seen")
    return problems


def problems_of(block: Block) -> list[str]:
    problems = schema_problems(block)
    for obj in yaml.safe_load_all(block.text):
        if isinstance(obj, dict):
            for pod in pod_specs(obj):
                problems += follow_problems(pod)
    return problems


MANIFESTS = manifest_blocks(DOCS)


def test_the_docs_have_a_manifest() -> None:
    assert "docs/follow.md" in [b.doc for b in MANIFESTS]


@pytest.mark.parametrize("block", MANIFESTS, ids=str)
def test_manifest_is_valid_and_follows_as_documented(block: Block) -> None:
    assert problems_of(block) == []


def test_the_planted_manifests_fail() -> None:
    planted = manifest_blocks([FIXTURES / "broken_manifests.md"])
    found = [problems_of(block) for block in planted]
    assert found == [
        ["not a whole object: apiVersion and kind are missing"],
        [
            "Pod: spec.containers.1.readinessProbe: Additional properties are not allowed "
            "('periodSecond' was unexpected)"
        ],
        [
            "traceml-follow: --streams not given (step_time): a sidecar exports every stream",
            "traceml-follow: readinessProbe on --metrics-host 127.0.0.1: the kubelet probes "
            "the pod's IP and never reaches it",
        ],
        [
            "traceml-follow: runAsUser ['0', '1000']: the training user's",
            "traceml-follow: shareProcessNamespace: the aggregator's /proc is not seen",
        ],
    ]
