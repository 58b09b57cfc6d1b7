"""Stored op-count references follow a workload point, not the sweep around it."""
from mrbench.harness.record.references import params_hash
from mrbench.workloads.spec_decode import WORKLOAD, Params


def _point(proposers, ks=(2,)):
    p = Params(ks=list(ks), proposers=proposers, batch_sizes=[4])
    point = next(pp for tag, pp in WORKLOAD.points(p) if tag == "k2-ngram-b4")
    return dict(point.model_dump())


def test_adding_a_point_to_a_sweep_keeps_the_other_points_references():
    """quick's spec sweep gained an eagle point: the n-gram point's stored counts still
    apply (CI once missed the 38372 fault because they did not)."""
    assert params_hash(_point(["ngram"])) == params_hash(_point(["ngram", "eagle"]))
    assert params_hash(_point(["ngram"])) == params_hash(_point(["ngram"], ks=(2, 4)))


def test_a_different_point_or_shape_has_its_own_reference():
    base = _point(["ngram"])
    assert params_hash(base) != params_hash(dict(base, k=4))
    assert params_hash(base) != params_hash(dict(base, max_tokens=64))


def test_the_reference_file_names_the_vllm_targets_model_only():
    """The vllm target's GPU default and `--model tiny` keep a reference file each; the
    bundled target's file stays as it was (its model is part of its build), so the nightly
    job's stored references still apply."""
    from mrbench.harness.record.references import REF_DIR, build_key
    common = dict(runner="v2", device="cpu", dtype="float32")
    bundled = build_key(dict(common, target="bundled", model="/x/gsm8k-tiny"))
    assert (REF_DIR / f"{bundled}.json").is_file()
    assert build_key(dict(common, target="vllm", model="/m/llama-1b-seed0")).endswith(
        "-llama-1b-seed0")
