"""Kubernetes Events posted by the operator (core/v1, so `kubectl describe` shows them)."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Protocol

from kubernetes.client import CoreV1Api, CoreV1Event

from spillover_operator.constants import FIELD_MANAGER

MAX_MESSAGE = 1000


class EventRecorder(Protocol):
    def __call__(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Record an Event about `obj` (a dict with apiVersion, kind and metadata)."""


def event_body(
    obj: Mapping[str, Any], type_: str, reason: str, message: str, *, now: datetime.datetime
) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 1] + "…"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "generateName": f"{meta.get('name', 'object')}.",
            "namespace": meta.get("namespace"),
        },
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "type": type_,
        "reason": reason,
        "message": message,
        "source": {"component": FIELD_MANAGER},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class ApiEventRecorder:
    """Posts Events through the core/v1 API (needs `events: create` in the namespace)."""

    def __init__(self, core_api: CoreV1Api) -> None:
        self.core_api = core_api

    def __call__(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        body = event_body(obj, type_, reason, message, now=datetime.datetime.now(datetime.UTC))
        namespace = body["metadata"]["namespace"]
        event = CoreV1Event.from_dict(body)
        if event is None:  # from_dict returns None only for a None input
            raise ValueError("could not build an Event")
        self.core_api.create_namespaced_event(namespace, event)
