"""The metrics that tell whether anything runs: live instances, and each job's next run and latest success.

They are read from the database at scrape time (as ``persched check`` reads
it), so a job that stopped running shows by its timestamps even when the
scheduler that ran it is gone. The alert rules of docs/observability.md are
parsed, and each metric their expressions name is one these metrics export.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest

pytest.importorskip("prometheus_client")  # the extra: persched[metrics]

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from persched._model.instant import from_datetime, seconds
from persched.metrics import SchedulerMetrics
from persched.testing import FakeClock
from tests.support.helpers import TIMEOUT

if TYPE_CHECKING:
    from persched import JobScheduler
    from tests.conftest import SchedulerFactory

pytestmark = pytest.mark.every_engine

START: Final = 1_700_000_000.123457  # an odd instant: sub-second, not a round number
DOCS: Final = Path(__file__).resolve().parents[2] / "docs" / "observability.md"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def scrape(registry: CollectorRegistry) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
    }


def started(
    make_scheduler: SchedulerFactory, clock: FakeClock, registry: CollectorRegistry, *, per_job: bool
) -> JobScheduler:
    sched = make_scheduler(clock=clock)
    SchedulerMetrics(registry, per_job=per_job, jobs_cache_seconds=0).attach(sched)
    sched.schedule("a", "tests.support.jobs:record", 5.0, args=("a",))
    sched.schedule("boom", "tests.support.jobs:fail", 5.0, args=("boom", "no"))
    sched.schedule("held", "tests.support.jobs:record", 5.0, args=("held",))
    sched.pause("held")
    sched.start()
    clock.advance(5.0)
    assert sched.wait_idle(TIMEOUT)
    return sched


def test_each_job_s_next_run_and_latest_success_with_per_job(
    make_scheduler: SchedulerFactory, clock: FakeClock
) -> None:
    registry = CollectorRegistry()
    sched = started(make_scheduler, clock, registry, per_job=True)
    samples = scrape(registry)
    a = sched.get_job("a")
    assert a is not None
    (run,) = sched.runs("a")
    assert run.finished_at is not None
    next_runs = {dict(k[1])["job"]: v for k, v in samples.items() if k[0] == "persched_job_next_run_timestamp_seconds"}
    assert next_runs == {
        "a": seconds(from_datetime(a.next_run_at)),
        "boom": pytest.approx(next_runs["a"]),  # the same grid: both every 5 s from START
    }  # "held" is paused: no next run
    successes = {
        dict(k[1])["job"]: v for k, v in samples.items() if k[0] == "persched_job_last_success_timestamp_seconds"
    }
    assert successes == {"a": seconds(from_datetime(run.finished_at))}  # "boom" never succeeded
    assert samples[("persched_instances_live", frozenset())] == 1


def test_without_per_job_only_the_live_instances(make_scheduler: SchedulerFactory, clock: FakeClock) -> None:
    registry = CollectorRegistry()
    started(make_scheduler, clock, registry, per_job=False)
    names = {name for name, _ in scrape(registry)}
    assert "persched_instances_live" in names
    assert not {n for n in names if n.startswith("persched_job_")}


def _alert_rules() -> str:
    text = DOCS.read_text(encoding="utf-8")
    found = re.search(r"<!-- alert-rules -->\n```yaml\n(.*?)^```", text, re.S | re.M)
    assert found is not None, "docs/observability.md has no alert rules block after <!-- alert-rules -->"
    return found.group(1)


def test_the_alert_rules_of_the_docs_parse_and_name_metrics_that_exist(
    make_scheduler: SchedulerFactory, clock: FakeClock, tmp_path: Path
) -> None:
    yaml = pytest.importorskip("yaml")
    rules_text = _alert_rules()
    groups = yaml.safe_load(rules_text)["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert rules
    assert all({"alert", "expr", "for", "annotations"} <= set(rule) for rule in rules)
    registry = CollectorRegistry()
    started(make_scheduler, clock, registry, per_job=True)
    exported = {name for name, _ in scrape(registry)}
    named = {name for rule in rules for name in re.findall(r"\bpersched_[a-z_]+\b", rule["expr"])}
    assert named
    assert named <= exported, named - exported
    promtool = shutil.which("promtool")  # Debian's prometheus package has it; checked where installed
    if promtool is not None:
        path = tmp_path / "rules.yml"
        path.write_text(rules_text, encoding="utf-8")
        checked = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr
