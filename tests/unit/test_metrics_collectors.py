"""/metrics carries prometheus-client's standard collectors beside the service's own.

Prometheus users alert on process memory, CPU and open fds and read python_info;
the service's own registry (extender/metrics.py) has none of them unless it
registers them. Scraped through the health app, as Prometheus does.
"""

from __future__ import annotations

import os

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from extender.api.health import create_health_app
from extender.metrics import Metrics


def scrape(metrics: Metrics) -> dict[str, list[tuple[dict[str, str], float]]]:
    app = create_health_app(lambda: (True, "ok"), metrics)
    with TestClient(app) as client:
        text = client.get("/metrics").text
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def only(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    assert name in samples, f"{name} is not exported"
    [(_, value)] = samples[name]
    return value


def test_process_memory_cpu_and_fds_of_this_process_are_exported() -> None:
    samples = scrape(Metrics())
    assert only(samples, "process_resident_memory_bytes") > 0
    assert only(samples, "process_cpu_seconds_total") > 0
    assert only(samples, "process_open_fds") >= 3, "stdin, stdout and stderr at least"
    assert only(samples, "process_max_fds") > 0
    assert only(samples, "process_start_time_seconds") > 0
    with open(f"/proc/{os.getpid()}/statm") as statm:
        resident_pages = int(statm.read().split()[1])
    # The same process: the collector's figure is this process's, within a few pages.
    resident = resident_pages * os.sysconf("SC_PAGE_SIZE")
    assert abs(only(samples, "process_resident_memory_bytes") - resident) < resident / 2


def test_python_info_and_the_garbage_collector_are_exported() -> None:
    samples = scrape(Metrics())
    [(labels, value)] = samples["python_info"]
    assert value == 1
    assert labels["implementation"] and labels["version"]
    generations = {labels["generation"] for labels, _ in samples["python_gc_collections_total"]}
    assert generations == {"0", "1", "2"}


def test_every_registry_gets_them_so_each_test_service_and_the_real_one_agree() -> None:
    first, second = scrape(Metrics()), scrape(Metrics())
    for samples in (first, second):
        assert "process_resident_memory_bytes" in samples
        assert "gang_extender_gangs_bound_total" in samples
