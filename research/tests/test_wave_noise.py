"""research/wave_noise.py: the noise anatomy reads a per-wave level shift and an order cost
back from step tables built to have them."""
import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

spec = importlib.util.spec_from_file_location(
    "wave_noise", Path(__file__).resolve().parents[1] / "wave_noise.py")
wave_noise = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wave_noise)


def _steps(level_sd: float, second_cost: float, waves: int = 400, steps: int = 60,
           seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for w in range(waves):
        order = ["candidate", "baseline"] if w % 2 == 0 else ["baseline", "candidate"]
        for pos, side in enumerate(order):
            level = rng.normal(0, level_sd) + (np.log1p(second_cost) if pos else 0.0)
            for i in range(steps):
                rows.append(dict(workload="gsm8k", side=side, wave=w, wave_pos=pos,
                                 kind="uniform_decode", num_reqs=16 - i // 10,
                                 t_start_s=w * 10 + pos * 5 + i * 1e-3,
                                 duration_ms=0.5 * np.exp(level + rng.normal(0, 0.05))))
    return pd.DataFrame(rows)


def test_reads_back_the_level_shift_and_the_order_cost():
    res = wave_noise.wave_noise(_steps(level_sd=0.10, second_cost=0.05))
    # two independent levels per wave: the log ratio's sd is sqrt(2) x 0.10
    assert abs(res["wave_sd"] - 0.10 * np.sqrt(2)) < 0.02
    assert abs(res["order"] - np.log1p(0.05)) < 0.02
    assert abs(res["ac1"]) < 0.1                   # steps within a wave are independent


def test_no_level_no_order():
    res = wave_noise.wave_noise(_steps(level_sd=0.0, second_cost=0.0))
    assert res["wave_sd"] < 0.02 and abs(res["order"]) < 0.005
