"""The Grafana dashboard of deploy/grafana/ against what it reads. Its JSON: a Prometheus datasource
variable, template variables every query's ``$name`` is one of, each panel titled with at least one
PromQL target on that datasource, and the panels issue 39 asks for. Then each of its queries, its
variables substituted as Grafana would, through a real Prometheus (Debian's) that scrapes a real
dashboard while a job of four real ranks streams to it (tests/server/job_ranks.py): ranks 0 and 1
data-parallel (a gloo all-reduce each step), rank 1's loader the slow one, then rank 0 killed; rank
2's worker stuck; rank 3's worker killed by SIGKILL. Every metric a query names is one ``/metrics``
exports; every query is valid PromQL and answers with the series the job has, the slowest rank first.

Grafana's JSON schema cannot be fetched here (no network), so this checks what the schema cannot: that
the queries read the metrics as they are exported. 60-80 s on the 2-core VM at load 15-20, 90-140 s
with two `yes` beside it there: most of it four ranks importing torch and the dashboard starting.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port, wait_for
from tests.server.prometheus import INTERVAL, LOOK, Prometheus

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "loaderscope-job.json"
JOB = "grafana-job"
SCRAPE = int(INTERVAL.removesuffix("s"))
# Grafana's built-in variables, the Prometheus datasource's "scrape interval" set to Prometheus's:
# $__rate_interval is max($__interval + scrape interval, 4 x scrape interval), the second for a panel
# 600 pixels wide or more ($__interval is the dashboard's hour over the panel's pixels); $__range, that hour.
BUILT_INS = {"__rate_interval": f"{4 * SCRAPE}s", "__interval": f"{SCRAPE}s", "__range": "1h"}
VARIABLE = re.compile(r"\$(\w+)|\[\[(\w+)\]\]|\$\{(\w+)(?::\w+)?\}")  # Grafana's three syntaxes
LABEL_VALUES = re.compile(r"label_values\((.+),\s*(\w+)\)")
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
            "inf", "nan"}
# Before rank 0 is killed no rank is lost: the lost ranks' table (instant `== 1` filters) is empty.
EMPTY_WHILE_NONE_LOST = {("table", "Lost ranks")}


# --- the JSON -------------------------------------------------------------------------------------


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside a collapsed row too."""
    return [p for top in board["panels"] for p in (top, *top.get("panels", []))]


def panel(board: dict[str, Any], kind: str, title: str) -> dict[str, Any]:
    found = [p for p in panels(board) if (p["type"], p["title"]) == (kind, title)]
    assert len(found) == 1, f"the dashboard should have one {kind} panel {title!r}, it has {len(found)}"
    return found[0]


def used_variables(text: str) -> set[str]:
    return {next(name for name in match.groups() if name) for match in VARIABLE.finditer(text)}


def test_the_dashboard_json_has_a_datasource_variable_and_titled_panels_of_promql_targets() -> None:
    board = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    (source,) = [v for v in variables.values() if v["type"] == "datasource"]
    assert source["query"] == "prometheus"
    on_it = {"type": "prometheus", "uid": f"${{{source['name']}}}"}
    queries = [v for v in variables.values() if v["type"] == "query"]
    assert [v["name"] for v in queries] == ["job", "loader"]
    for variable in queries:
        assert variable["datasource"] == on_it and LABEL_VALUES.fullmatch(variable["query"]["query"]), variable
        assert variable["definition"] == variable["query"]["query"]
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids)), ids
    graphs = [p for p in panels(board) if p["type"] != "row"]
    assert graphs
    for p in graphs:
        assert isinstance(p.get("title"), str) and p["title"].strip(), p
        assert p["datasource"] == on_it and p["targets"], p["title"]
        assert 0 <= p["gridPos"]["x"] and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for target in p["targets"]:
            assert target["datasource"] == on_it and target["expr"].strip(), (p["title"], target)
    texts = [t["expr"] for p in graphs for t in p["targets"]] + [v["query"]["query"] for v in queries]
    unknown = set().union(*map(used_variables, texts)) - set(variables) - set(BUILT_INS)
    assert not unknown, f"queries use variables the dashboard does not define: {sorted(unknown)}"
    # issue 39: the job's slowest rank per step, waiting share per rank, stuck and dead workers
    for kind, title in (("timeseries", "The slowest ranks: seconds waiting per step"),
                        ("timeseries", "Waiting share per rank"), ("stat", "Stuck workers"), ("stat", "Dead workers"),
                        ("table", "Stuck and dead workers"), ("stat", "Lost ranks"), ("table", "Lost ranks")):
        panel(board, kind, title)


# --- Grafana's substitution, and the metrics a query names ----------------------------------------


def regular_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def regex_escape(value: str) -> str:
    return re.sub(r"[$^*{}\[\]'+?.()|]", r"\\\g<0>", value.replace("\\", "\\\\\\\\"))


def formatted(variable: dict[str, Any], values: list[str] | None) -> str:
    """A variable's value in a query, as Grafana's Prometheus datasource writes it (interpolateQueryExpr
    in public/app/plugins/datasource/prometheus/datasource.ts): a single-valued variable escaped as a
    string, a multi-valued one as a regex alternation; ``None`` is "All", the custom all value as it is."""
    if values is None:
        return str(variable["allValue"])
    if not variable.get("multi") and not variable.get("includeAll"):
        (value,) = values
        return regular_escape(value)
    escaped = [regex_escape(v) for v in values]
    return escaped[0] if len(escaped) == 1 else f"({'|'.join(escaped)})"


def substituted(text: str, values: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name = next(n for n in match.groups() if n)
        return values[name] if name in values else BUILT_INS[name]

    return VARIABLE.sub(value, text)


def metric_names(promql: str) -> set[str]:
    """The metric names a query selects: its identifiers once strings, label matchers, label lists and
    ranges are gone, but functions, aggregations (followed by ``(``) and keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'", '""', promql)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    return {m.group(0) for m in re.finditer(r"(?<![\w.:])[a-zA-Z_:][\w:]*(?![\w:])(?!\s*\()", text)} - KEYWORDS


def test_metric_names_are_the_selected_series_of_a_query() -> None:
    assert metric_names('topk(5, rate(a_total{x="b_c", y=~"$z"}[5m]) / on (run) group_left (rank) b:c) '
                        'and sum by (job, le) (d) > bool 1e3 or quantile without (l) (0.5, e offset 1m)') \
        == {"a_total", "b:c", "d", "e"}


# --- a real job, a real dashboard, a real Prometheus ----------------------------------------------


class Job:
    """The ranks of JOB streaming to ``dashboard``, by rank: each in a process group of its own, with its
    DataLoader workers (a hung worker outlives its rank's main process otherwise)."""

    MODES = ("fast", "slow", "stuck", "crash")  # tests/server/job_ranks.py: 0 and 1 all-reduce

    def __init__(self, dashboard: Any, directory: Path) -> None:
        self.ranks: list[subprocess.Popen[bytes]] = []
        self.logs = [directory / f"rank{rank}.log" for rank in range(len(self.MODES))]
        pair = str(free_port())  # the all-reducing ranks' rendezvous
        for rank, mode in enumerate(self.MODES):
            with self.logs[rank].open("wb") as log:
                self.ranks.append(subprocess.Popen(
                    [sys.executable, "-m", "tests.server.job_ranks", dashboard.page_url, JOB, str(rank), mode,
                     *([pair] if rank < 2 else [])], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True))

    def kill(self, rank: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # every process of its group already gone
            os.killpg(self.ranks[rank].pid, signal.SIGKILL)
        self.ranks[rank].wait()

    def output(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-2000:]}" for log in self.logs)


@pytest.fixture
def scraped_job(start_server: Any, tmp_path: Path) -> Iterator[tuple[Any, Prometheus, Job]]:
    dashboard = start_server(stop_grace=1.0, kill_grace=1.0)
    prometheus = Prometheus(tmp_path / "prometheus", dashboard)
    job = Job(dashboard, tmp_path)
    yield dashboard, prometheus, job
    for rank in range(len(job.ranks)):
        job.kill(rank)
    prometheus.stop()


def query(prom: Prometheus, promql: str) -> list[dict[str, Any]]:
    """An instant query, as a panel's: valid PromQL, answered without a warning."""
    answer = httpx.get(f"{prom.url}/api/v1/query", params={"query": promql}, timeout=30).json()
    assert answer["status"] == "success" and not answer.get("warnings"), (promql, answer)
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def scalar(prom: Prometheus, promql: str) -> float | None:
    found = query(prom, promql)
    return float(found[0]["value"][1]) if found else None


def exported_names(dashboard: Any) -> set[str]:
    with dashboard.client() as http:
        text = http.get("/metrics").text
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


Answers = dict[tuple[str, str, str], list[dict[str, Any]]]  # (panel type, panel title, refId) -> series


def answered(prom: Prometheus, board: dict[str, Any], values: dict[str, str],
             empty: set[tuple[str, str]]) -> Answers:
    """Each target's series once every target outside ``empty`` has some (waited for: a rate needs
    two scrapes in its range); the ``empty`` panels' targets must have none."""
    answers: Answers = {}
    targets = {(p["type"], p["title"], t["refId"]): substituted(t["expr"], values)
               for p in panels(board) for t in p.get("targets", [])}

    def every_one() -> bool:
        answers.update({key: query(prom, promql) for key, promql in targets.items()
                        if key[:2] in empty or not answers.get(key)})
        return all(series or key[:2] in empty for key, series in answers.items())

    try:
        wait_for(every_one, 60, "every panel's query to answer with series", LOOK)
    except AssertionError as failed:
        silent = {key: targets[key] for key, series in answers.items() if not series and key[:2] not in empty}
        raise AssertionError(f"{failed}; no series for {silent}") from None
    for key in targets:
        assert not answers[key] if key[:2] in empty else answers[key], (key, targets[key], answers[key])
    return answers


def by_rank(series: list[dict[str, Any]]) -> dict[str, float]:
    return {s["metric"]["rank"]: float(s["value"][1]) for s in series}


def value(answers: Answers, kind: str, title: str) -> float:
    (series,) = answers[(kind, title, "A")]
    return float(series["value"][1])


def check_variables(prom: Prometheus, board: dict[str, Any], values: dict[str, str]) -> None:
    """The job and loader pickers list the job and its one loader, as Grafana asks for them."""
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            selector, label = LABEL_VALUES.fullmatch(variable["query"]["query"]).groups()  # type: ignore[union-attr]
            listed = prom.api(f"label/{label}/values", **{"match[]": substituted(selector, values)})
            assert listed == ([JOB] if variable["name"] == "job" else ["train"]), (variable["name"], listed)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_each_query_of_the_dashboard_answers_from_a_real_prometheus_scraping_a_real_job(
        scraped_job: tuple[Any, Prometheus, Job]) -> None:
    dashboard, prom, job = scraped_job
    board = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    choices = [{"job": formatted(variables["job"], [JOB]), "loader": formatted(variables["loader"], loader)}
               for loader in (None, ["train"])]  # "All", and the job's one loader picked

    rate = BUILT_INS["__rate_interval"]
    ready: list[tuple[str, Callable[[float | None], bool]]] = [
        (f'count(loaderscope_run_info{{training_job="{JOB}"}})', lambda n: n == 4),
        ('loaderscope_workers{rank="2",state="stuck"}', lambda n: n == 1),
        ('loaderscope_workers{rank="3",state="died"}', lambda n: n == 1),
        # the pair's first 3 batches (their waits for the workers to start) out of a rate's range
        *((f'min_over_time(loaderscope_batches_total{{rank="{r}"}}[{rate}])', lambda n: (n or 0) >= 3)
          for r in ("0", "1")),
    ]
    for promql, holds in ready:
        try:
            wait_for(lambda: holds(scalar(prom, promql)), 120, f"Prometheus to hold {promql}", LOOK)  # noqa: B023
        except AssertionError as failed:
            raise AssertionError(f"{failed}\n{job.output()}") from None

    exported = exported_names(dashboard)
    for p in panels(board):
        for target in p.get("targets", []):
            names = metric_names(substituted(target["expr"], choices[0]))
            assert names and names <= exported, (p["title"], sorted(names - exported), target["expr"])
    for variable in variables.values():
        if variable["type"] == "query":
            selector, _ = LABEL_VALUES.fullmatch(variable["query"]["query"]).groups()  # type: ignore[union-attr]
            assert metric_names(selector) <= exported, variable["name"]

    for values in choices:
        check_variables(prom, board, values)
        live = answered(prom, board, values, EMPTY_WHILE_NONE_LOST)
        assert value(live, "stat", "Ranks") == 4 and value(live, "stat", "Lost ranks") == 0
        assert value(live, "stat", "Stuck workers") == value(live, "stat", "Dead workers") == 1
        assert sorted((s["metric"]["rank"], s["metric"]["worker"], s["metric"]["state"])
                      for s in live[("table", "Stuck and dead workers", "A")]) == [("2", "1", "stuck"),
                                                                                  ("3", "1", "died")]
        # Ranks 0 and 1 step together at rank 1's pace: rank 1 waits about 0.3 s a step for its batch, rank 0
        # next to nothing (it waits in the all-reduce), by far less than half of that whatever the load.
        slowest = by_rank(live[("timeseries", "The slowest ranks: seconds waiting per step", "A")])
        assert set(slowest) == {"0", "1", "2", "3"} and slowest["1"] > 2 * slowest["0"], slowest
        waiting = by_rank(live[("timeseries", "Waiting share per rank", "A")])
        assert set(waiting) == {"0", "1", "2", "3"} and 1 >= waiting["1"] > 2 * waiting["0"], waiting

    job.kill(0)  # rank 0's process dies: its stream ends without run_end (rank 1's all-reduce then fails)
    wait_for(lambda: scalar(prom, 'loaderscope_producer_lost{rank="0"}') == 1, 60, "Prometheus to hold rank 0 lost",
             LOOK)
    for values in choices:
        lost = answered(prom, board, values, set())
        assert value(lost, "stat", "Lost ranks") == 1
        assert [s["metric"]["rank"] for s in lost[("table", "Lost ranks", "A")]] == ["0"]
        (age,) = lost[("table", "Lost ranks", "B")]
        assert age["metric"]["rank"] == "0" and float(age["value"][1]) >= 0
