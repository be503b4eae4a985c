"""A real Prometheus (Debian's package) on a free loopback port, scraping one dashboard with the
repository's rules: for the metrics tests of one run and of a fleet of ranks."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parents[2]


DEPLOY = ROOT / "deploy" / "prometheus"


RULES = DEPLOY / "loaderscope.rules.yml"


INTERVAL = "2s"  # scrapes and rule evaluations: short, but a scrape of a busy test box fits in it
# seconds between two looks at what Prometheus holds (a wait_for): it changes once a scrape or an
# evaluation, so looking every 50 ms only spends the CPU the rest of the suite wants
LOOK = 0.5
SHIPPED_HOLD = "1m"  # the `for:` of the rules a test waits to fire (stuck worker, lost rank)


def held_rules(directory: Path, hold: str) -> Path:
    """The repository's rules with each ``for: 1m`` held ``hold`` instead, written into ``directory``: a test
    then waits for an alert's firing, not for a minute. Only those lines differ from the shipped file: every
    expression, label and annotation Prometheus evaluates is the file's. promtool's unit tests
    (deploy/prometheus/loaderscope.rules.test.yml, run by test_metrics_prometheus.py) check the minute itself."""
    shipped, minute = RULES.read_text().splitlines(keepends=True), f"for: {SHIPPED_HOLD}"
    assert sum(line.strip() == minute for line in shipped) >= 2, f"the stuck and lost rules should hold {minute}"
    text = "".join(line.replace(minute, f"for: {hold}") if line.strip() == minute else line for line in shipped)
    path = directory / RULES.name
    path.write_text(text)
    return path


def tool(name: str) -> str:
    found = shutil.which(name)
    assert found, f"{name} is not installed: `apt-get install -y prometheus` (scripts/test.sh does it)"
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Prometheus:
    """``prometheus`` on a free loopback port, scraping one dashboard, with the repository's rules (their
    minute-long holds ``hold`` instead, when given: ``held_rules``)."""

    def __init__(self, directory: Path, dashboard: Any, interval: str = INTERVAL, hold: str | None = None) -> None:
        directory.mkdir()
        rules = RULES if hold is None else held_rules(directory, hold)
        (directory / "token").write_text(dashboard.token)
        (directory / "prometheus.yml").write_text(f"""
global:
  scrape_interval: {interval}
  scrape_timeout: {interval}
  evaluation_interval: {interval}
rule_files: ["{rules}"]
scrape_configs:
  - job_name: loaderscope
    authorization: {{type: Bearer, credentials_file: "{directory / 'token'}"}}
    static_configs: [{{targets: ["127.0.0.1:{dashboard.port}"]}}]
""")
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = directory / "prometheus.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [tool("prometheus"), f"--config.file={directory / 'prometheus.yml'}",
                 f"--storage.tsdb.path={directory / 'data'}", f"--web.listen-address={self.url[len('http://'):]}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for(self.ready, 60, "Prometheus to be ready")

    def ready(self) -> bool:
        assert self.process.poll() is None, self.log.read_text()
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    def api(self, path: str, **params: str) -> Any:
        answer = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10).json()
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, promql: str) -> dict[str, float]:
        """An instant query: each series' value, by the label the dashboard's series differ in."""
        return {_key(r["metric"]): float(r["value"][1]) for r in self.api("query", query=promql)["result"]}

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _key(metric: dict[str, str]) -> str:
    return metric.get("worker") or metric.get("state") or metric.get("status") or ""
