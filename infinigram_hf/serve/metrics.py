"""Prometheus metrics of the server: requests by endpoint and status, latency by endpoint.

With several worker processes, ``PROMETHEUS_MULTIPROC_DIR`` (set by the serve command to a fresh
directory before the workers start) makes every scrape add up all workers' counts, whichever
worker answers it.
"""
from __future__ import annotations

import os
from typing import Any

BUCKETS = (.0002, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30)


class Metrics:
    """One set of collectors per app (its own registry, so several apps in one process are fine)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram
        self._multi = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        # in multiprocess mode the values live in files; the registry is made per scrape
        self.registry = None if self._multi else CollectorRegistry()
        kw: dict[str, Any] = {"registry": self.registry}  # None: not registered, values go to the files
        self.requests = Counter("infinigram_requests", "Requests by endpoint and HTTP status",
                                ["endpoint", "status"], **kw)
        self.latency = Histogram("infinigram_request_seconds", "Request latency by endpoint", ["endpoint"],
                                 buckets=BUCKETS, **kw)

        self._children: dict = {}  # (endpoint, status) -> (counter, histogram): labels() once each

    def _child(self, endpoint: str, status: int) -> tuple:
        c = self._children.get((endpoint, status))
        if c is None:
            c = self._children[(endpoint, status)] = (self.requests.labels(endpoint, str(status)),
                                                      self.latency.labels(endpoint))
        return c

    def count(self, endpoint: str, status: int) -> None:
        self._child(endpoint, status)[0].inc()

    def observe(self, endpoint: str, status: int, seconds: float) -> None:
        counter, histogram = self._child(endpoint, status)
        counter.inc()
        histogram.observe(seconds)

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
        if self._multi:
            from prometheus_client import multiprocess
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
