"""harness.interrupts: SIGINT and SIGTERM raise KeyboardInterrupt even when the process
inherited SIGINT ignored, and are recorded, not raised, inside held()."""
import os
import signal

import pytest

from mrbench.harness.run import interrupts


def _signal_self(sig: signal.Signals) -> None:
    os.kill(os.getpid(), sig)      # pending at once; Python runs the handler between bytecodes


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_raises_even_when_sigint_was_inherited_ignored(sig):
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)     # a background job's start
    try:
        with interrupts.installed():
            with pytest.raises(KeyboardInterrupt):
                _signal_self(sig)
                for _ in range(1000):                      # the handler runs between bytecodes
                    pass
            assert interrupts.caught() == sig.name
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN   # restored after
    finally:
        signal.signal(signal.SIGINT, old)


def test_a_signal_inside_held_is_recorded_and_the_body_finishes():
    with interrupts.installed():
        done = False
        with interrupts.held():
            _signal_self(signal.SIGTERM)
            for _ in range(1000):
                pass
            done = True
        assert done and interrupts.caught() == "SIGTERM"
        with pytest.raises(KeyboardInterrupt):             # outside held it raises again
            _signal_self(signal.SIGINT)
            for _ in range(1000):
                pass
        assert interrupts.caught() == "SIGTERM"            # the first one is what it reports
    assert interrupts.caught() is None       # gone with installed(): no later command sees it
