"""What /metrics exports from a snapshot, and the Grafana dashboard asking only for that."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from callgate.metrics.export import METRICS, render
from callgate.metrics.gather import GroupRow, Snapshot

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "callgate.json"


def full_snapshot() -> Snapshot:
    return Snapshot(
        runs=Counter({"completed": 3, "paused_approval": 1}),
        runs_sampled=4,
        counts=Counter(
            {
                "calls|reserve_seat|succeeded": 2,
                "calls|reserve_seat|denied": 1,
                "finished|completed": 3,
                "reconciled|reconciler|applied": 1,
                "wait|approved|60": 2,
                "wait|approved|+Inf": 2,
                "wait|approved|sum_ms": 70_000,
            }
        ),
        deliveries=Counter({"ops|delivered": 5, "ops|failed": 1}),
        groups=[GroupRow("turns", 0, "model_turn", 2, 7), GroupRow("exec", 0, "executor", 0, None)],
        dead_letters={0: 4},
    )


def samples(snap: Snapshot) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = render(snap).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_each_figure_lands_under_its_name_and_labels() -> None:
    got = samples(full_snapshot())
    assert got[("callgate_runs", frozenset({("status", "completed")}))] == 3
    assert got[("callgate_runs_sampled", frozenset())] == 4
    calls = ("callgate_calls_total", frozenset({("tool", "reserve_seat"), ("outcome", "denied")}))
    assert got[calls] == 1
    assert got[("callgate_runs_finished_total", frozenset({("status", "completed")}))] == 3
    assert (
        got[
            (
                "callgate_reconciliations_total",
                frozenset({("by", "reconciler"), ("outcome", "applied")}),
            )
        ]
        == 1
    )
    turns = frozenset({("stream", "turns"), ("partition", "0"), ("group", "model_turn")})
    assert got[("callgate_stream_pending", turns)] == 2
    assert got[("callgate_stream_lag", turns)] == 7
    exec_group = frozenset({("stream", "exec"), ("partition", "0"), ("group", "executor")})
    assert ("callgate_stream_lag", exec_group) not in got, "unknown lag is left out, not 0"
    assert got[("callgate_dead_letters", frozenset({("partition", "0")}))] == 4
    assert (
        got[
            (
                "callgate_webhook_deliveries_total",
                frozenset({("endpoint", "ops"), ("outcome", "delivered")}),
            )
        ]
        == 5
    )


def test_the_approval_wait_is_a_histogram_in_seconds() -> None:
    got = samples(full_snapshot())
    approved = ("decision", "approved")
    assert got[("callgate_approval_wait_seconds_count", frozenset({approved}))] == 2
    assert got[("callgate_approval_wait_seconds_sum", frozenset({approved}))] == 70
    assert (
        got[("callgate_approval_wait_seconds_bucket", frozenset({approved, ("le", "60.0")}))] == 2
    )
    assert (
        got[("callgate_approval_wait_seconds_bucket", frozenset({approved, ("le", "30.0")}))] == 0
    )


def exported_names() -> set[str]:
    """Every sample name the collector writes for a full snapshot, and its families."""
    text = render(full_snapshot()).decode()
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    return names | {f.name for f in text_string_to_metric_families(text)}


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in dashboard["panels"]:
        found += [panel, *panel.get("panels", [])]
    return found


def test_the_dashboard_asks_only_for_exported_metrics_and_shows_each() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_names()
    shown = set()
    for panel in panels(dashboard):
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = set(re.findall(r"\bcallgate_[a-z_]+", target["expr"]))
            assert names, (panel["title"], target["expr"])
            assert names <= exported, (panel["title"], names - exported)
            shown |= names
    families = {re.sub(r"_(total|bucket|sum|count)$", "", n) for n in shown}
    assert families >= set(METRICS), set(METRICS) - families
