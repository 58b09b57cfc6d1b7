"""Where an engine start's time went: the child's clock turned into the start record's
phases, and the progress line's words for them."""
from mrbench.harness.run.engines.start_phases import describe_phases, phases_of


def test_a_new_process_counts_its_own_start_and_a_reused_one_does_not():
    clock = dict(serving_since=103.0, opened=103.5, ready=163.5)
    ph = phases_of(100.0, clock, dict(before_engine_s=20.0, engine_s=39.0, compile_s=15.0,
                                         after_engine_s=0.8))
    assert ph["process_s"] == 3.0 and ph["open_s"] == 60.0 and ph["compile_s"] == 15.0
    reused = phases_of(200.0, dict(serving_since=103.0, opened=200.1, ready=230.1), {})
    assert reused == dict(process_s=None, open_s=30.0)
    assert phases_of(1.0, {}, {}) == {}            # an in-process start without an account


def test_the_progress_line_names_what_was_measured_and_leaves_out_what_was_not():
    ph = dict(process_s=3.04, open_s=60.0, before_engine_s=20.0, engine_s=39.0,
              compile_s=None, after_engine_s=0.8)
    assert describe_phases(ph) == ("process 3.0 s, imports and setup 20.0 s, LLM() 39.0 s, "
                                   "instrumentation 0.8 s")
    assert describe_phases({}) == ""
