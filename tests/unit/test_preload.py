"""Engine processes forked from a preloading process (harness.run.engines.preload): they run with
their code imported once, see the harness's environment of the moment they were asked for,
and are spawned instead where the preloading process cannot serve."""
import pytest
import support.env_probe  # noqa: F401  (registers the "envprobe" target in this process)

from mrbench.contract import EngineOptions
from mrbench.harness.run.engines import preload
from mrbench.harness.run.engines.worker import HostPool
from mrbench.harness.run.targets.base import SideSpec


@pytest.fixture
def pool(monkeypatch, tmp_path):
    monkeypatch.setenv("MRBENCH_TARGET_MODULES", "support.env_probe")
    monkeypatch.setenv(preload.START_ENV, "preload")     # these engines are on the CPU
    p = HostPool(timeout_s=60)
    yield p
    p.shutdown()


def _open(pool, tmp_path, key="a", target="envprobe"):
    spec = SideSpec(runner="v1", target=target)
    pre = pool.preloader(spec, tmp_path / "logs")
    if pre is not None:
        pre.wait_ready(60)
    pending = pool.begin_open(key, target, spec, EngineOptions(), tmp_path / f"{key}.log", pre)
    return pool.finish_open(key, pending), pre


def test_an_engine_is_forked_from_the_process_that_imported_its_code(pool, tmp_path):
    session, pre = _open(pool, tmp_path)
    seen = session.resolved()
    assert session.host.started_by == "preloaded fork"
    assert pre.ready_s is not None and pre.failure is None
    assert seen["ppid"] == pre.server._forkserver_pid != seen["pid"]
    assert seen["imported_in"] == pre.server._forkserver_pid   # imported once, not here
    assert "ready" in pre.log.read_text()
    # imported under the target's environment for the side; the engine has the harness's
    assert seen["preloaded_env"] == "1" and seen["engine_env"] is None


def test_engines_share_a_preloading_process_while_the_environment_holds(pool, tmp_path,
                                                                       monkeypatch):
    first, pre = _open(pool, tmp_path, "a")
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "another test")   # volatile: no new process
    second, same = _open(pool, tmp_path, "b")
    assert same is pre
    assert first.resolved()["ppid"] == second.resolved()["ppid"]
    monkeypatch.setenv("ENV_PROBE", "changed")                  # read at import: a new one
    third, other = _open(pool, tmp_path, "c")
    assert other is not pre
    seen = third.resolved()
    assert seen["probe"] == "changed" and seen["ppid"] == other.server._forkserver_pid


def test_a_forked_engine_takes_the_harness_environment_of_its_start(pool, tmp_path,
                                                                    monkeypatch):
    """A variable that changed since the preloading process started (one that is no reason
    for a new one) reaches the engine as the harness has it when it asks for the process."""
    _, pre = _open(pool, tmp_path, "a")
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "marker-for-the-child")
    session, same = _open(pool, tmp_path, "b")
    assert same is pre and session.host.started_by == "preloaded fork"
    assert session.resolved()["volatile"] == "marker-for-the-child"


def test_engines_are_preloaded_on_a_gpu_and_spawned_on_the_cpu_unless_asked(monkeypatch):
    monkeypatch.delenv(preload.START_ENV, raising=False)
    assert preload.start_method("cuda") == "preload"
    assert preload.start_method("cpu") == "spawn"
    for asked in ("spawn", "preload"):
        monkeypatch.setenv(preload.START_ENV, asked)
        assert preload.start_method("cuda") == preload.start_method("cpu") == asked
    monkeypatch.setenv(preload.START_ENV, "auto")
    assert preload.start_method("cpu") == "spawn"


def test_cpu_engines_are_spawned_by_default(pool, tmp_path, monkeypatch):
    monkeypatch.delenv(preload.START_ENV)
    session, pre = _open(pool, tmp_path)
    assert pre is None and session.host.started_by == "spawn"


def test_spawn_on_request(pool, tmp_path, monkeypatch):
    monkeypatch.setenv(preload.START_ENV, "spawn")
    session, pre = _open(pool, tmp_path)
    assert pre is None and session.host.started_by == "spawn"
    seen = session.resolved()
    assert seen["imported_in"] == seen["pid"]                   # it imported its own code


def test_a_preloading_process_that_dies_leaves_its_engines_spawned(pool, tmp_path,
                                                                  monkeypatch):
    monkeypatch.setattr(preload, "PRELOAD_MODULE", "support.preload_dies")
    session, pre = _open(pool, tmp_path)
    assert pre.failure and "ended before its imports" in pre.failure
    assert session.host.started_by == "spawn"
    assert session.resolved()["probe"] is None


def test_a_preloading_process_that_is_not_fork_safe_is_not_used(pool, tmp_path, monkeypatch):
    """Its log says an import initialised CUDA (here a stand-in module says so): the harness
    stops it and spawns the engine."""
    monkeypatch.setattr(preload, "PRELOAD_MODULE", "support.preload_unsafe")
    session, pre = _open(pool, tmp_path)
    assert pre.failure and "not fork-safe" in pre.failure
    assert session.host.started_by == "spawn"


def test_environment_key_ignores_volatile_variables(monkeypatch):
    key = preload.environment_key()
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "x")
    assert preload.environment_key() == key
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert preload.environment_key() != key
