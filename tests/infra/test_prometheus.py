"""infra/prometheus/ (alerting and recording rules) and infra/grafana/ (dashboards), checked by the
real tools: `promtool check rules`, `promtool test rules` on the unit tests in
infra/prometheus/tests/, and a live `prometheus` scraping a real `evertune up` with an endpoint on
the sim engine, a canary rolling out and chat requests through the gateway: every metric the rules
and the dashboards read must exist there, every rule must evaluate without error, and every
dashboard query must answer.

The binaries are Debian's prometheus 2.42, unpacked by `make install` under `.venv/prometheus/`
(no daemon). Without them these tests fail and say so.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.apps.cli.helpers import cli_env, run_cli, wait_up_ready
from tests.checkout import INFRA, ROOT
from tests.infra.promql_names import (
    PromqlSyntaxError,
    family,
    metric_names,
    tokens,
    variable_query_expr,
)

PROMETHEUS_BIN = Path(sys.executable).parent.parent / "prometheus" / "usr" / "bin"
RULES = INFRA / "prometheus" / "rules"
UNIT_TESTS = INFRA / "prometheus" / "tests"
GRAFANA = INFRA / "grafana"
OPERATIONS = ROOT / "docs" / "operations.md"
#: The evertune jobs of the scrape configuration in docs/operations.md.
JOBS = ("evertune", "evertune-gateway")


def tool(name: str) -> Path:
    """A Prometheus binary from `make install`; the test fails (not skips) when it is missing."""
    path = PROMETHEUS_BIN / name
    if not path.is_file():
        pytest.fail(f"{path} is missing: run make install (it unpacks Debian's prometheus there)")
    return path


def rule_files() -> list[Path]:
    files = sorted(RULES.glob("*.yml"))
    assert files, f"no rules in {RULES}"
    return files


def unit_test_files() -> list[Path]:
    files = sorted(UNIT_TESTS.glob("*.yml"))
    assert files, f"no unit tests in {UNIT_TESTS}"
    return files


def load_rules(path: Path) -> list[dict[str, Any]]:
    """Every rule of a rules file (alerting and recording), in order."""
    doc = yaml.safe_load(path.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def all_rules() -> list[dict[str, Any]]:
    return [rule for path in rule_files() for rule in load_rules(path)]


def alert_names() -> set[str]:
    return {rule["alert"] for rule in all_rules() if "alert" in rule}


def recorded_names() -> set[str]:
    return {rule["record"] for rule in all_rules() if "record" in rule}


def dashboards() -> dict[str, dict[str, Any]]:
    files = sorted(GRAFANA.glob("*.json"))
    assert files, f"no dashboards in {GRAFANA}"
    return {path.name: json.loads(path.read_text()) for path in files}


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows included (rows themselves not)."""
    found: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            found.extend(panel.get("panels", []))
        else:
            found.append(panel)
    return found


def dashboard_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) of every query of a dashboard: panel targets, annotations, variables."""
    queries = [
        (f"panel {panel['title']!r} target {target['refId']}", target["expr"])
        for panel in panels(dashboard)
        for target in panel["targets"]
    ]
    queries += [
        (f"annotation {a['name']!r}", a["expr"])
        for a in dashboard["annotations"]["list"]
        if a.get("datasource", {}).get("type") == "prometheus"
    ]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            queries.append((f"variable {variable['name']!r}", variable_query_expr(text)))
    return [(where, expr) for where, expr in queries if expr]


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings (lower case, punctuation dropped, spaces to -)."""
    anchors: set[str] = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (match := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)):
            text = re.sub(r"`", "", match.group(1)).lower()
            anchors.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return anchors


# --- the tokenizer ---------------------------------------------------------------------------


def test_metric_names_of_expressions() -> None:
    cases = {
        'sum by (le, deployment) (rate(x_bucket{endpoint="$endpoint", le!="+Inf"}[$__rate_interval]))': {
            "x_bucket"
        },
        "histogram_quantile(0.99, sum without (instance) (rate(h_bucket[5m] offset 1h)))": {"h_bucket"},
        'a > on (rule) group_left (severity) max by (rule, severity) (b{x=~"a|b"})': {"a", "b"},
        "a / on (endpoint) group_left () (1 - max by (endpoint) (c))": {"a", "c"},
        "a and on(job, instance) b == 0 unless ignoring (x) c": {"a", "b", "c"},
        'level:metric:rate5m{deployment="all"} > 14.4 and bool 1e3': {"level:metric:rate5m"},
        "max_over_time(rate(m_total[5m])[1h:1m]) * 2": {"m_total"},
        'vllm:num_requests_waiting{endpoint="e"} + {__name__="by_name"}': {
            "vllm:num_requests_waiting",
            "by_name",
        },
        'count(up{job=~"evertune|evertune-gateway"} == 0) # a comment with words': {"up"},
        "topk(5, sum by (kind) (increase(f_total[${__range}])))": {"f_total"},
        'label_replace(z, "severity", "$1", "rule", "(page)-.*")': {"z"},
        "deriv(g[10m]) > 0 and g > 0 @ start()": {"g"},
    }
    for expr, names in cases.items():
        assert metric_names(expr) == names, expr
    # a name misspelt is a name all the same: the live check below is what catches it
    assert metric_names("rate(evertune_gateway_ttft_second_bucket[1m])") == {
        "evertune_gateway_ttft_second_bucket"
    }


def test_tokenizer_refuses_what_it_does_not_know() -> None:
    for bad in ("sum(rate(x[5m])", 'x{a="b"', "x ? y", "x)"):
        with pytest.raises(PromqlSyntaxError):
            metric_names(bad)
    assert ("var", "$__rate_interval") in tokens("rate(x[$__rate_interval])")


def test_variable_queries_and_families() -> None:
    assert variable_query_expr('label_values(m_total{endpoint!="unknown"}, endpoint)') == (
        'm_total{endpoint!="unknown"}'
    )
    assert variable_query_expr("label_values(endpoint)") == ""
    assert variable_query_expr("sum(x)") == "sum(x)"
    assert family("evertune_gateway_ttft_seconds_bucket") == "evertune_gateway_ttft_seconds"
    assert family("evertune_profiler_sink_insert_seconds_sum") == "evertune_profiler_sink_insert_seconds"
    assert family("evertune_gateway_requests_total") == "evertune_gateway_requests_total"


# --- the rules, by promtool ------------------------------------------------------------------


def test_promtool_checks_every_rules_file() -> None:
    promtool = tool("promtool")
    for path in rule_files():
        result = subprocess.run(
            [promtool, "check", "rules", path], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS" in result.stdout, result.stdout


def test_promtool_check_catches_a_planted_mistake(tmp_path: Path) -> None:
    planted = tmp_path / "planted.yml"
    text = (RULES / "evertune-slo.yml").read_text()
    planted.write_text(text.replace("group_left ()", "group_left (", 1))
    result = subprocess.run(
        [tool("promtool"), "check", "rules", planted], capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0, result.stdout


def run_unit_tests(files: list[Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("promtool"), "test", "rules", *files],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_promtool_unit_tests_pass() -> None:
    result = run_unit_tests(unit_test_files())
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(unit_test_files()), result.stdout


@pytest.mark.parametrize(
    ("rules_file", "original", "planted", "test_file"),
    [
        # a threshold a tenth of the page-1h rule's: it fires at 70m, when the test wants silence
        (
            "evertune-slo.yml",
            'rate1h{deployment="all"} > 14.4',
            'rate1h{deployment="all"} > 1.44',
            "slo_long_test.yml",
        ),
        # the fast rule without its minimum of bad requests: the trickle endpoint pages
        ("evertune-slo.yml", ") >= 5", ") >= 0", "slo_test.yml"),
        # a service down for 10 minutes before it pages: the test wants it at 5m
        ("evertune-health.yml", "        for: 2m\n", "        for: 10m\n", "health_test.yml"),
        # the idle-runner alert matching no runner: the test wants it to fire
        ("evertune-health.yml", "on (job, instance)", "on (job, instance, hardware)", "health_test.yml"),
    ],
)
def test_unit_tests_catch_planted_mistakes(
    tmp_path: Path, rules_file: str, original: str, planted: str, test_file: str
) -> None:
    rules = tmp_path / "rules"
    tests = tmp_path / "tests"
    shutil.copytree(RULES, rules)
    shutil.copytree(UNIT_TESTS, tests)
    text = (rules / rules_file).read_text()
    assert original in text
    (rules / rules_file).write_text(text.replace(original, planted, 1))
    result = run_unit_tests([tests / test_file])
    assert result.returncode != 0, result.stdout
    assert "FAILED" in result.stdout + result.stderr


def alerts_tested(files: list[Path]) -> dict[str, set[str]]:
    """Alert name -> what its unit tests expect of it: "fires" (some alert expected), "silent"
    (none expected at some time)."""
    tested: dict[str, set[str]] = {}
    for path in files:
        doc = yaml.safe_load(path.read_text())
        for test in doc["tests"]:
            for case in test.get("alert_rule_test", []):
                expected = "fires" if case.get("exp_alerts") else "silent"
                tested.setdefault(case["alertname"], set()).add(expected)
    return tested


def untested_alerts(names: set[str], tested: dict[str, set[str]]) -> list[str]:
    """Alerts without a unit test that sees them fire and one that sees them stay silent."""
    return sorted(name for name in names if tested.get(name, set()) != {"fires", "silent"})


def test_every_alert_has_unit_tests_that_see_it_fire_and_stay_silent() -> None:
    names = alert_names()
    assert len(names) >= 10, names
    tested = alerts_tested(unit_test_files())
    assert untested_alerts(names, tested) == []
    assert sorted(set(tested) - names) == [], "unit tests of alerts that do not exist"
    # every rules file is loaded by some unit test file, by a path that exists
    loaded = {
        (path.parent / name).resolve()
        for path in unit_test_files()
        for name in yaml.safe_load(path.read_text())["rule_files"]
    }
    assert loaded == {path.resolve() for path in rule_files()}
    # planted: an alert whose only test is removed is reported
    without = {k: v for k, v in tested.items() if k != "EvertuneRolloutStuck"}
    assert untested_alerts(names, without) == ["EvertuneRolloutStuck"]
    assert untested_alerts(names, {**tested, "EvertuneServiceDown": {"fires"}}) == ["EvertuneServiceDown"]


def test_every_alert_is_annotated_with_a_runbook_in_the_operations_guide() -> None:
    anchors = github_anchors(OPERATIONS.read_text())
    assert "evertuneservicedown" in github_anchors("### EvertuneServiceDown\n")
    for rule in all_rules():
        if "record" in rule:
            assert rule["record"].count(":") == 2, f"{rule['record']}: level:metric:operations"
            continue
        annotations = rule.get("annotations", {})
        assert {"summary", "description", "runbook"} <= set(annotations), rule["alert"]
        page, _, anchor = annotations["runbook"].partition("#")
        assert page == "docs/operations.md", rule["alert"]
        assert anchor in anchors, f"{rule['alert']}: no heading #{anchor} in docs/operations.md"
        severity = rule.get("labels", {}).get("severity")
        # the monitor-following alert takes its severity from the threshold gauge's label
        assert severity in ("page", "ticket") or "group_left (severity)" in rule["expr"], rule["alert"]


# --- the dashboards --------------------------------------------------------------------------


def test_dashboards_are_grafana_json_with_a_datasource_variable() -> None:
    found = dashboards()
    assert {"evertune-endpoint.json", "evertune-services.json"} <= set(found)
    uids = [d["uid"] for d in found.values()]
    assert len(set(uids)) == len(uids)
    for name, dashboard in found.items():
        assert dashboard["title"] and dashboard["schemaVersion"] >= 36, name
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource", name
        assert variables["datasource"]["query"] == "prometheus", name
        ids = [p["id"] for p in dashboard["panels"]]
        assert len(set(ids)) == len(ids), f"{name}: panel ids repeat"
        boxes: list[tuple[int, int, int, int]] = []
        for panel in dashboard["panels"]:
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24, f"{name}: {panel['title']} is wider than the grid"
            box = (grid["x"], grid["y"], grid["x"] + grid["w"], grid["y"] + grid["h"])
            overlapping = [
                b for b in boxes if box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3]
            ]
            assert not overlapping, f"{name}: {panel['title']} overlaps another panel"
            boxes.append(box)
        for panel in panels(dashboard):
            where = f"{name}: panel {panel['title']!r}"
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
            assert panel["targets"], f"{where} has no targets"
            refs = [t["refId"] for t in panel["targets"]]
            assert len(set(refs)) == len(refs), where
            for target in panel["targets"]:
                assert target["expr"].strip(), where
                assert target.get("datasource", panel["datasource"])["uid"] == "${datasource}", where
        for where, expr in dashboard_queries(dashboard):
            assert metric_names(expr), f"{name}: {where} reads no metric"
    endpoint = found["evertune-endpoint.json"]
    assert {v["name"] for v in endpoint["templating"]["list"]} >= {"datasource", "endpoint"}
    for panel in panels(endpoint):  # every panel of the endpoint's dashboard is about $endpoint
        if panel["title"] != "Deployments, all endpoints":
            assert any("$endpoint" in t["expr"] for t in panel["targets"]), panel["title"]
    kinds = {a["name"] for a in endpoint["annotations"]["list"]}
    assert {"Rollout in progress", "Promotions (all endpoints)", "Rollbacks (all endpoints)"} <= kinds


# --- live: a real evertune up scraped by a real prometheus ------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def get_json(url: str, timeout: float = 5) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def cli_json(*args: str) -> Any:
    result = run_cli(*args, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads([line for line in result.stdout.splitlines() if line.startswith("{")][-1])


def wait_for(what: str, problems: Callable[[], list[str]], timeout_s: float) -> None:
    """Wait until `problems()` finds none; fail with the last ones found."""
    deadline = time.monotonic() + timeout_s
    while (found := problems()) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert found == [], f"{what}: {found}"


def chat(base_url: str, endpoint: str, text: str) -> None:
    body = json.dumps(
        {"model": endpoint, "messages": [{"role": "user", "content": text}], "max_tokens": 8, "stream": True}
    ).encode()
    request = urllib.request.Request(
        f"{base_url}/v1/chat/completions", data=body, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        assert b"[DONE]" in response.read()


@contextlib.contextmanager
def stopped_at_end(proc: subprocess.Popen[str], stop: signal.Signals) -> Iterator[subprocess.Popen[str]]:
    """Stops `proc` (by its pid) when the block ends, however it ends."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(stop)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def scrape_config(runtime: dict[str, Any], rules: list[Path]) -> dict[str, Any]:
    """prometheus.yml: the jobs of docs/operations.md as static targets from runtime.json."""

    def target(service: str) -> dict[str, Any]:
        url = urllib.parse.urlparse(runtime["metrics"][service])
        assert url.path == "/metrics", url
        return {"targets": [url.netloc], "labels": {"service": service}}

    services = sorted(s for s in runtime["metrics"] if s != "gateway")
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(path) for path in rules],
        "scrape_configs": [
            {"job_name": "evertune", "static_configs": [target(s) for s in services]},
            {"job_name": "evertune-gateway", "static_configs": [target("gateway")]},
        ],
    }


def test_live_prometheus_scrapes_every_metric_the_rules_and_dashboards_read(tmp_path: Path) -> None:
    prometheus_bin = tool("prometheus")
    data_dir = tmp_path / "data"
    receivers = '[{"kind": "webhook", "url": "http://127.0.0.1:9/alerts", "name": "oncall"}]'
    env = cli_env(EVERTUNE_SLA_MONITOR_RECEIVERS=receivers)
    started = time.monotonic()
    up_log = (tmp_path / "up.log").open("w")
    command = [sys.executable, "-m", "evertune", "up", "--data-dir", str(data_dir)]
    up = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=up_log, text=True)
    with up_log, stopped_at_end(up, signal.SIGINT):
        wait_up_ready(up, timeout_s=60, stderr_log=tmp_path / "up.log")
        runtime = json.loads((data_dir / "runtime.json").read_text())
        assert set(runtime["metrics"]) == {
            "gateway",
            "profiler",
            "sla-monitor",
            "searcher",
            "runner",
            "deployer",
        }
        # an endpoint on the sim engine; a second configuration promoted with a long first canary
        # step, so that a rollout is in flight while Prometheus scrapes
        model = next(path.parent for path in (data_dir / "models").glob("*/config.json"))
        where = ("--data-dir", str(data_dir))
        cli_json(
            "endpoints", "create", "voice", "--model", str(model), "--engine", "sim", "--hardware",
            "sim-cpu", "--ttft-p99-ms", "500", "--canary-steps", "10,100", "--canary-step-s", "600", *where,
        )  # fmt: skip

        def not_ready() -> list[str]:
            got = cli_json("endpoints", "get", "voice", *where)
            return (
                []
                if got["state"] == "ENDPOINT_STATE_READY"
                else [f"{got['state']} {got.get('stateMessage', '')}"]
            )

        wait_for("endpoint ready", not_ready, 30)
        gateway = runtime["metrics"]["gateway"].removesuffix("/metrics")
        for i in range(12):
            chat(gateway, "voice", f"hello {i}")
        cli_json("deploy", "promote", "voice", "--engine", "sim", "--knob", "max_num_seqs=3", *where)

        config = tmp_path / "prometheus.yml"
        config.write_text(yaml.safe_dump(scrape_config(runtime, rule_files())))
        port = free_port()
        prom_command = [
            str(prometheus_bin),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ]
        prom_log = (tmp_path / "prometheus.log").open("w")
        prom = subprocess.Popen(prom_command, stdout=prom_log, stderr=subprocess.STDOUT, text=True)
        with prom_log, stopped_at_end(prom, signal.SIGTERM):
            api = f"http://127.0.0.1:{port}/api/v1"

            def targets_down() -> list[str]:
                try:
                    active = get_json(f"{api}/targets")["data"]["activeTargets"]
                except OSError:
                    return ["prometheus not answering"]
                down = [
                    f"{t['labels']['service']}: {t['health']} {t['lastError']}"
                    for t in active
                    if t["health"] != "up"
                ]
                return down if len(active) == 6 else [*down, f"{len(active)} targets"]

            wait_for("every target up", targets_down, 20)
            for i in range(12, 20):  # traffic while Prometheus scrapes
                chat(gateway, "voice", f"hello {i}")

            referenced: dict[str, set[str]] = {}
            for rule in all_rules():
                for name in metric_names(rule["expr"]):
                    referenced.setdefault(name, set()).add(str(rule.get("alert") or rule["record"]))
            for file, dashboard in dashboards().items():
                for where_, expr in dashboard_queries(dashboard):
                    for name in metric_names(expr):
                        referenced.setdefault(name, set()).add(f"{file} {where_}")
            recorded = recorded_names()
            assert recorded <= set(referenced), "recording rules nothing reads"

            def missing() -> list[str]:
                present = set(get_json(f"{api}/label/__name__/values")["data"]) | {"up"}
                return sorted(f"{n} (read by {sorted(referenced[n])[:2]})" for n in set(referenced) - present)

            wait_for("every metric referenced", missing, 20)
            present = set(get_json(f"{api}/label/__name__/values")["data"])
            # the same check with a planted misspelling: it is reported
            assert "evertune_gateway_ttft_second_bucket" not in present
            assert {"evertune_gateway_ttft_seconds_bucket", *recorded} <= present

            # every rule evaluates without error (a bad vector match shows here, not in promtool)
            def rules_not_ok() -> list[str]:
                groups = get_json(f"{api}/rules")["data"]["groups"]
                rules = [r for g in groups for r in g["rules"]]
                bad = [
                    f"{r['name']}: {r['health']} {r.get('lastError', '')}"
                    for r in rules
                    if r["health"] != "ok"
                ]
                return bad if len(rules) == len(all_rules()) else [*bad, f"{len(rules)} rules loaded"]

            wait_for("every rule evaluated", rules_not_ok, 10)

            # the figures behind the new series: 20 requests through the gateway, each judged once
            # by the monitor; one canary at its first step of 600 s (policy: 5 holds, 2 s lag)
            def value(query: str) -> float | None:
                result = get_json(f"{api}/query?" + urllib.parse.urlencode({"query": query}))["data"][
                    "result"
                ]
                assert len(result) <= 1, (query, result)
                return float(result[0]["value"][1]) if result else None

            def counts_off() -> list[str]:
                figures = {
                    "gateway": 'sum(evertune_gateway_requests_total{endpoint="voice"})',
                    "judged": 'evertune_sla_requests_total{endpoint="voice", deployment="all"}',
                    "by deployment": 'sum(evertune_sla_requests_total{endpoint="voice", deployment!="all"})',
                }
                return [f"{k} {value(q)}" for k, q in figures.items() if value(q) != 20]

            wait_for("every request counted", counts_off, 10)
            good = value('evertune_sla_good_requests_total{endpoint="voice", deployment="all"}')
            assert good is not None and 0 < good <= 20
            assert value('evertune_deployer_rollout_step_limit_seconds{endpoint="voice"}') == 6 * (600 + 2)
            age = value('evertune_deployer_rollout_step_age_seconds{endpoint="voice"}')
            assert age is not None and 0 < age < 60
            assert value('evertune_runner_jobs_pending{hardware="cpu"}') == 0
            assert value('evertune_profiler_sink_consumer_pending{consumer="profiler-sink"}') == 0
            assert (
                value('endpoint:evertune_sla_burn_rate:rate2m{endpoint="voice", deployment="all"}')
                is not None
            )

            # every dashboard query answers; a panel's with series, for this endpoint (an
            # annotation's `increase(...) > 0` is empty until its event happens). A rate over 30 s
            # needs two scrapes of a series: on a loaded machine a service's first ones come late,
            # so the panels get the same wait as the metrics above (an empty one still fails)
            def empty_panels() -> list[str]:
                empty: list[str] = []
                for file, dashboard in dashboards().items():
                    for where_, expr in dashboard_queries(dashboard):
                        query = (
                            expr.replace("$endpoint", "voice")
                            .replace("$__rate_interval", "30s")
                            .replace("${__range}", "5m")
                            .replace("$__range", "5m")
                        )
                        answer = get_json(f"{api}/query?" + urllib.parse.urlencode({"query": query}))
                        assert answer["status"] == "success", (file, where_, answer)
                        if where_.startswith("panel") and not answer["data"]["result"]:
                            empty.append(f"{file} {where_}: {query}")
                return empty

            wait_for("every dashboard panel has series", empty_panels, 20)
    assert time.monotonic() - started < 90
