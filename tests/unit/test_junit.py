"""`run --junit-xml FILE`: the checks as JUnit XML, read back with a JUnit reader
(junitparser, what CI test reporters parse): one case per check, a regression a failure
with its figures, a check in error an error, a check not gated or not measured skipped
(never a pass), a failed side an error, an unsupported workload skipped."""
import json

import pytest
from junitparser import Error, Failure, JUnitXml, Skipped

from mrbench.harness.cli import main
from mrbench.harness.record.run_record import RunSummary
from mrbench.harness.show.junit import write_junit


def _check(metric, verdict, note="", workload="gsm8k"):
    return dict(workload=workload, metric=metric, unit="ms", baseline=10.0, candidate=11.0,
                delta=0.1, ci=[0.05, 0.15], p_value=0.01, threshold="+5% and significant",
                method="per-wave P99 ratio", verdict=verdict, note=note)


SUMMARY = dict(
    verdict="error", suite="quick",
    checks=[_check("p99_step_ms", "regression"), _check("median_step_ms", "pass"),
            _check("ops_per_step", "info", "deterministic count; runners differ"),
            _check("syncs_per_step", "error", "not measured: no hot phase ran"),
            _check("token_agreement", "pass", workload="trace-pd")],
    failures=[dict(workload="spec", side="candidate", error="engine exited with code -9",
                   traceback="Traceback ...")],
    unsupported=[dict(workload="warmup", side="baseline", target="vllm",
                      reason="vLLM on CPU has no CUDA-graph classes")])


def _cases(path):
    xml = JUnitXml.fromfile(str(path))
    out = {}
    for suite in xml:
        for case in suite:
            kinds = [type(r) for r in case.result]
            out[(suite.name, case.name)] = (kinds, case.result)
    return xml, out


def test_each_check_is_a_case_and_its_verdict_its_result(tmp_path):
    path = write_junit(RunSummary.model_validate(SUMMARY), tmp_path / "junit.xml")
    xml, cases = _cases(path)
    assert len(cases) == len(SUMMARY["checks"]) + 2
    kinds = {k: v[0] for k, v in cases.items()}
    assert kinds[("mrbench.quick.gsm8k", "p99_step_ms")] == [Failure]
    assert kinds[("mrbench.quick.gsm8k", "median_step_ms")] == []           # passed
    assert kinds[("mrbench.quick.gsm8k", "ops_per_step")] == [Skipped]
    assert kinds[("mrbench.quick.gsm8k", "syncs_per_step")] == [Error]
    assert kinds[("mrbench.quick.trace-pd", "token_agreement")] == []
    assert kinds[("mrbench.quick.spec", "candidate side")] == [Error]
    assert kinds[("mrbench.quick.warmup", "baseline side")] == [Skipped]
    failure = cases[("mrbench.quick.gsm8k", "p99_step_ms")][1][0]
    assert "baseline 10, candidate 11 ms" in failure.message and "+5%" in failure.message
    assert "not measured" in cases[("mrbench.quick.gsm8k", "syncs_per_step")][1][0].message
    xml.update_statistics()
    assert (xml.tests, xml.failures, xml.errors, xml.skipped) == (7, 1, 2, 2)


def test_a_directory_is_refused_before_anything_runs(tmp_path, capsys):
    assert main(["run", "smoke", "--junit-xml", str(tmp_path), "--out",
                 str(tmp_path / "run")]) == 2
    assert "is a directory" in capsys.readouterr().err and not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_run_writes_its_checks_as_junit(tmp_path):
    """A real run with a fault: the JUnit file holds the run's checks, the caught one a
    failure."""
    suite = tmp_path / "s.yaml"
    suite.write_text("""name: j
thresholds: {latency_metrics: []}
workloads:
  - id: a
    workload: gsm8k
    params: {limit: 4, max_num_seqs: 2, wave_size: 2, profile_limit: 1, max_tokens: 24}
""")
    out, junit = tmp_path / "run", tmp_path / "ci" / "junit.xml"
    code = main(["run", str(suite), "--fault", "seq-lens-sync", "--out", str(out),
                 "--junit-xml", str(junit)])
    assert code == 1
    summary = json.loads((out / "summary.json").read_text())
    _, cases = _cases(junit)
    assert {name for _, name in cases} == {c["metric"] for c in summary["checks"]}
    failed = {name for (_, name), (kinds, _) in cases.items() if Failure in kinds}
    assert failed == {c["metric"] for c in summary["checks"] if c["verdict"] == "regression"}
    assert "syncs_per_step" in failed
