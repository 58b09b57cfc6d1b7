"""workloads/traces.py: real traces load, shared hash prefixes give shared token prefixes,
shaping and synthetic streams behave, and any malformed line is reported at its exact line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mrbench.contract import BadInput, data_dir
from mrbench.workloads.traces import (
    TraceRequest,
    load_azure,
    load_mooncake,
    load_trace,
    prompt_tokens,
    shape,
    synthetic,
)

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TRACES = data_dir() / "traces"
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def real(name: str) -> Path:
    path = TRACES / name
    if not path.is_file():
        pytest.skip(f"trace {path} is absent (set MRBENCH_DATA_DIR to the shared data dir)")
    return path


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """One directory for all hypothesis examples (tmp_path is per test, not per example)."""
    return tmp_path_factory.mktemp("traces")


def write(folder: Path, lines: list[str]) -> Path:
    """A fresh file per hypothesis example."""
    fd, name = tempfile.mkstemp(dir=folder, suffix=".trace")
    with os.fdopen(fd, "wb") as f:
        f.write("\n".join(lines).encode("utf-8"))
    return Path(name)


# ---- real files ------------------------------------------------------------------------

def test_mooncake_conversation_first_200():
    reqs = load_mooncake(real("mooncake_conversation_trace.jsonl"), limit=200)
    assert len(reqs) == 200
    assert reqs[0].arrival_s == 0.0
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(reqs, reqs[1:]))
    assert all(r.input_len >= 1 and r.output_len >= 1 for r in reqs)
    # Mooncake: one id per started 512-token block; this trace starts every prompt with id 0
    assert all(len(r.hash_ids) == -(-r.input_len // 512) for r in reqs)
    assert all(r.hash_ids[0] == 0 for r in reqs)


def test_load_trace_finds_bare_names_in_data_dir(tmp_path, monkeypatch):
    path = real("mooncake_conversation_trace.jsonl")
    monkeypatch.setenv("MRBENCH_DATA_DIR", str(path.parents[1]))
    monkeypatch.chdir(tmp_path)
    assert load_trace(path.name, limit=3) == load_mooncake(path, limit=3)


def test_azure_conv_limit_100():
    path = real("azure_llm_2023_conv.csv")
    reqs = load_azure(path, limit=100)
    assert len(reqs) == 100 and reqs[0] == TraceRequest(0.0, 374, 44, ())
    # 2023-11-16 18:15:46.6805900 -> 18:15:50.9951690: 7 fractional digits kept exactly
    assert reqs[1].arrival_s == pytest.approx(4.314579, abs=1e-9)
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(reqs, reqs[1:]))
    assert load_trace(str(path), limit=100) == reqs


def test_real_shared_block_gives_shared_tokens():
    a, b = load_mooncake(real("mooncake_conversation_trace.jsonl"), limit=2)
    assert a.hash_ids[0] == b.hash_ids[0] and a.hash_ids[1] != b.hash_ids[1]
    ta, tb = prompt_tokens(a, 32000), prompt_tokens(b, 32000)
    assert ta[:512] == tb[:512] and ta[512:1024] != tb[512:1024]


# ---- prompt tokens ---------------------------------------------------------------------

def test_shared_hash_prefix_shares_token_prefix():
    a = TraceRequest(0.0, 40, 5, (7, 8, 9))
    b = TraceRequest(1.0, 45, 6, (7, 8, 10))   # shares two 16-token blocks with a
    ta, tb = (prompt_tokens(r, 100, block_tokens=16, seed=3, reserved=3) for r in (a, b))
    assert len(ta) == 40 and len(tb) == 45
    assert ta[:32] == tb[:32] and ta[32:40] != tb[32:40]
    assert all(3 <= t < 100 for t in ta + tb)
    assert prompt_tokens(a, 100, block_tokens=16, seed=3, reserved=3) == ta   # deterministic
    assert prompt_tokens(a, 100, block_tokens=16, seed=4, reserved=3) != ta   # seed matters


def test_tail_and_partial_blocks():
    full = TraceRequest(0.0, 32, 1, (5, 6))
    part = TraceRequest(0.0, 20, 1, (5, 6))        # stops inside block 6
    long = TraceRequest(0.0, 50, 1, (5, 6))        # 18 tokens past the hash blocks
    tf, tp, tl = (prompt_tokens(r, 50, block_tokens=16) for r in (full, part, long))
    assert tp == tf[:20] and tl[:32] == tf and len(tl) == 50
    # no hash_ids: requests differing in any field get different tokens
    x, y = TraceRequest(0.0, 30, 4), TraceRequest(0.5, 30, 4)
    assert prompt_tokens(x, 1000) != prompt_tokens(y, 1000)
    assert prompt_tokens(x, 1000) == prompt_tokens(TraceRequest(0.0, 30, 4), 1000)
    with pytest.raises(ValueError):
        prompt_tokens(x, vocab_size=3, reserved=3)


def test_prompt_tokens_ignore_pythonhashseed():
    code = ("from mrbench.workloads.traces import TraceRequest, prompt_tokens;"
            "print(sum(i * t for i, t in enumerate(prompt_tokens("
            "TraceRequest(1.5, 700, 3, (4,)), 50000, seed=2))))")
    root = Path(__file__).resolve().parents[2]
    outs = {subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                           check=True, env={**os.environ, "PYTHONHASHSEED": h}).stdout
            for h in ("1", "2")}
    assert len(outs) == 1


@FAST
@given(st.lists(st.integers(0, 5), max_size=6), st.lists(st.integers(0, 5), max_size=6),
       st.integers(1, 60), st.integers(1, 60), st.integers(2, 40))
def test_prompt_tokens_property(ha, hb, na, nb, vocab):
    a, b = TraceRequest(0.0, na, 1, tuple(ha)), TraceRequest(1.0, nb, 1, tuple(hb))
    ta, tb = prompt_tokens(a, vocab, block_tokens=8), prompt_tokens(b, vocab, block_tokens=8)
    assert len(ta) == na and len(tb) == nb and all(0 <= t < vocab for t in ta + tb)
    common = 0
    while common < min(len(ha), len(hb)) and ha[common] == hb[common]:
        common += 1
    shared = min(common * 8, na, nb)
    assert ta[:shared] == tb[:shared]


# ---- shape and synthetic ---------------------------------------------------------------

def test_shape_scales_and_clips():
    reqs = [TraceRequest(0.0, 1200, 50, (1, 2, 3)), TraceRequest(10.0, 300, 900, (1,))]
    out = shape(reqs, time_scale=0.1, max_input_len=600, max_output_len=100)
    assert out == [TraceRequest(0.0, 600, 50, (1, 2)), TraceRequest(1.0, 300, 100, (1,))]
    assert shape(reqs) == reqs
    assert shape(reqs, max_input_len=512)[0].hash_ids == (1,)
    assert shape(reqs, max_input_len=513)[0].hash_ids == (1, 2)   # partial block still covered
    for bad in (dict(time_scale=-1.0), dict(time_scale=float("nan")), dict(max_input_len=0),
                dict(max_output_len=True)):
        with pytest.raises(BadInput, match="trace shaping"):
            shape(reqs, **bad)


def test_synthetic():
    kw = dict(n=20000, rate=4.0, input_len=(32, 256), output_len=(16, 128), seed=1)
    reqs = synthetic(**kw)
    assert reqs == synthetic(**kw) and reqs != synthetic(**{**kw, "seed": 2})
    assert len(reqs) == 20000 and reqs[0].arrival_s == 0.0
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(reqs, reqs[1:]))
    assert reqs[-1].arrival_s / (len(reqs) - 1) == pytest.approx(1 / 4.0, rel=0.05)
    ins = sorted(r.input_len for r in reqs)
    assert ins[0] >= 32 and ins[-1] <= 256 and all(16 <= r.output_len <= 128 for r in reqs)
    assert ins[0] == 32 and ins[-1] == 256                     # both ends reached
    assert ins[len(ins) // 2] == pytest.approx((32 * 257) ** 0.5, rel=0.1)   # log-uniform
    assert all(r.hash_ids == () for r in reqs)


def test_synthetic_prefix_share():
    reqs = synthetic(50, 1.0, (64, 64), (4, 4), seed=0, prefix_share=0.5, block_tokens=16)
    assert all(r.hash_ids == (0, 1) for r in reqs)
    toks = [prompt_tokens(r, 1000, block_tokens=16) for r in reqs[:2]]
    assert toks[0][:32] == toks[1][:32] and toks[0][32:] != toks[1][32:]


def test_load_trace_synthetic_spec():
    reqs = load_trace("synthetic:n=200,rate=2.0,input=32-256,output=16-128,seed=0")
    assert reqs == synthetic(200, 2.0, (32, 256), (16, 128), 0)
    assert load_trace("synthetic:n=200,rate=2.0,input=32-256,output=16-128", limit=5) == reqs[:5]
    assert load_trace("synthetic: n=3, rate=1, input=8, output=2-3")[0].input_len == 8


@pytest.mark.parametrize("body, needle", [
    ("n=0,rate=1,input=1-2,output=1-2", "n must be"),
    ("n=x,rate=1,input=1-2,output=1-2", "n='x' is not an integer"),
    ("n=2,rate=-1,input=1-2,output=1-2", "rate must be"),
    ("n=2,rate=inf,input=1-2,output=1-2", "rate must be"),
    ("n=2,rate=1,input=9-2,output=1-2", "input must be"),
    ("n=2,rate=1,input=a-b,output=1-2", "input='a-b'"),
    ("n=2,rate=1,input=1-2", "missing output"),
    ("n=2,rate=1,input=1-2,output=1-2,speed=3", "unknown key 'speed'"),
    ("n=2,n=3,rate=1,input=1-2,output=1-2", "n given twice"),
    ("n=2,rate=1,input=1-2,output=1-2,prefix=2", "prefix must be"),
    ("n=2,rate=1,,input=1-2,output=1-2", "expected key=value"),
])
def test_synthetic_spec_errors(body, needle):
    spec = f"synthetic:{body}"
    with pytest.raises(BadInput) as e:
        load_trace(spec)
    assert str(e.value).startswith(f"trace spec {spec!r}: ") and needle in str(e.value)


def test_whole_file_errors(tmp_path, monkeypatch):
    with pytest.raises(BadInput, match="does not exist"):
        load_trace(str(tmp_path / "nope.jsonl"))
    # a bare file name is looked for in the data directory, and the error says where
    monkeypatch.setenv("MRBENCH_DATA_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInput, match="MRBENCH_DATA_DIR") as e:
        load_trace("nope.jsonl")
    assert str(tmp_path / "traces") in str(e.value)
    with pytest.raises(BadInput, match="expected a .jsonl"):
        load_trace(str(tmp_path / "trace.txt"))
    (tmp_path / "blank.jsonl").write_text("\n  \n")
    with pytest.raises(BadInput, match="no requests"):
        load_mooncake(tmp_path / "blank.jsonl")
    (tmp_path / "head.csv").write_text(AZURE_HEADER + "\n")
    with pytest.raises(BadInput, match="no requests"):
        load_azure(tmp_path / "head.csv")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(BadInput, match="empty file"):
        load_azure(tmp_path / "empty.csv")
    (tmp_path / "hdr.csv").write_text("TIMESTAMP,Context,GeneratedTokens\n2023-01-01 00:00:00,1,1")
    with pytest.raises(BadInput, match=r"hdr.csv:1: header lacks column\(s\) ContextTokens$"):
        load_azure(tmp_path / "hdr.csv")
    (tmp_path / "ok.jsonl").write_text('{"timestamp": 0, "input_length": 1, '
                                       '"output_length": 1, "hash_ids": []}\n')
    with pytest.raises(BadInput, match="limit"):
        load_mooncake(tmp_path / "ok.jsonl", limit=0)


GOOD = dict(timestamp=5, input_length=3, output_length=2, hash_ids=[1])


@pytest.mark.parametrize("line, needle", [
    ("{", "not JSON"),
    ("[1, 2]", "expected a JSON object, got list"),
    (json.dumps({k: v for k, v in GOOD.items() if k != "hash_ids"}), "missing field(s) hash_ids"),
    (json.dumps({**GOOD, "input_length": True}), "input_length must be an integer >= 1, got True"),
    (json.dumps({**GOOD, "output_length": 0}), "output_length must be an integer >= 1, got 0"),
    (json.dumps({**GOOD, "input_length": 3.0}), "input_length must be an integer"),
    (json.dumps({**GOOD, "timestamp": -1}), "timestamp must be a finite number >= 0"),
    (json.dumps({**GOOD, "timestamp": False}), "timestamp must be"),
    (json.dumps({**GOOD, "timestamp": 1e400}), "timestamp must be"),       # Infinity
    (json.dumps({**GOOD, "timestamp": 10**400}), "timestamp must be"),     # too big for float
    (json.dumps({**GOOD, "hash_ids": [1, True]}), "hash_ids must be a list of integers >= 0"),
    (json.dumps({**GOOD, "hash_ids": [-1]}), "hash_ids must be"),
    (json.dumps({**GOOD, "hash_ids": "1,2"}), "hash_ids must be"),
])
def test_mooncake_line_errors(tmp_path, line, needle):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([json.dumps(GOOD), "", line, json.dumps(GOOD)]))
    with pytest.raises(BadInput) as e:
        load_mooncake(path)
    assert str(e.value).startswith(f"trace {path}:3: ") and needle in str(e.value)


def test_mooncake_float_timestamps_and_extra_fields(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({**GOOD, "timestamp": 2.5, "note": "x"}) + "\n"
                    + json.dumps({**GOOD, "timestamp": 1}) + "\r\n")
    assert [r.arrival_s for r in load_mooncake(path)] == [0.0, 0.0015]


def test_limit_stops_before_a_bad_line(tmp_path):
    good = json.dumps(GOOD)
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([good, good, "not json"]))
    assert len(load_mooncake(path, limit=2)) == 2
    with pytest.raises(BadInput, match=f"{path}:3: not JSON"):
        load_mooncake(path, limit=3)


# ---- generated files: round trip and exact line of any garbage --------------------------

mooncake_records = st.fixed_dictionaries({
    "timestamp": st.integers(0, 10**9), "input_length": st.integers(1, 10**6),
    "output_length": st.integers(1, 10**5), "hash_ids": st.lists(st.integers(0, 10**6), max_size=5),
})
# a few blank lines between records: they are skipped but still counted
mooncake_lines = st.lists(st.tuples(mooncake_records, st.sampled_from(["", "   "]), st.booleans()),
                          max_size=12)


def _layout(items: list[tuple[str, str, bool]]) -> list[str]:
    lines = []
    for text, blank, add_blank in items:
        lines.append(text)
        if add_blank:
            lines.append(blank)
    return lines


@FAST
@given(mooncake_lines.filter(bool))
def test_mooncake_round_trip(scratch, items):
    path = write(scratch, _layout([(json.dumps(r), b, ab) for r, b, ab in items]))
    recs = [r for r, _, _ in items]
    t0 = min(r["timestamp"] for r in recs)
    expected = [TraceRequest((r["timestamp"] - t0) / 1000, r["input_length"], r["output_length"],
                             tuple(r["hash_ids"]))
                for r in sorted(recs, key=lambda r: r["timestamp"])]
    assert load_mooncake(path) == expected
    assert load_trace(str(path.rename(path.with_suffix(".jsonl")))) == expected


wrong_value = st.one_of(st.none(), st.booleans(), st.text(max_size=5),
                        st.lists(st.integers(), max_size=2), st.dictionaries(st.text(), st.none()))


@st.composite
def bad_mooncake_record(draw):
    rec = draw(mooncake_records)
    key = draw(st.sampled_from(sorted(rec)))
    how = draw(st.sampled_from(["drop", "wrong", "bad number"]))
    if how == "drop":
        del rec[key]
    elif how == "wrong":
        rec[key] = draw(wrong_value.filter(lambda v: key != "hash_ids" or not _id_list(v)))
    elif key == "hash_ids":
        rec[key] = rec[key] + [draw(st.sampled_from([-1, 1.5, True, "3", None]))]
    elif key == "timestamp":   # floats are fine as timestamps, negatives and non-finite not
        rec[key] = draw(st.sampled_from([-1, -0.5, float("nan"), float("inf")]))
    else:                      # lengths must be integers >= 1
        rec[key] = draw(st.sampled_from([0, -1, 1.5, 2.0]))
    return json.dumps(rec)


def _id_list(v: object) -> bool:
    return isinstance(v, list) and all(type(x) is int and x >= 0 for x in v)


def _not_a_record(text: str) -> bool:
    try:
        obj = json.loads(text.removeprefix("\ufeff"))   # the loader drops a BOM on line 1
    except (ValueError, RecursionError):
        return True
    return not isinstance(obj, dict)


garbage_line = st.text(st.characters(codec="utf-8", exclude_characters="\n"), min_size=1,
                       max_size=40) \
    .filter(lambda s: s.strip())


@FAST
@given(mooncake_lines, st.one_of(
    garbage_line.filter(_not_a_record), bad_mooncake_record(),
    st.recursive(st.integers() | st.text(max_size=4), lambda c: st.lists(c, max_size=3))
    .map(json.dumps)), st.data())
def test_mooncake_garbage_line_is_named(scratch, items, garbage, data):
    lines = _layout([(json.dumps(r), b, ab) for r, b, ab in items])
    at = data.draw(st.integers(0, len(lines)))
    lines.insert(at, garbage)
    path = write(scratch, lines)
    with pytest.raises(BadInput) as e:
        load_mooncake(path)
    msg = str(e.value)
    assert msg.startswith(f"trace {path}:{at + 1}: ") and "\n" not in msg


def _azure_time(base: datetime, offset_100ns: int) -> tuple[str, int]:
    """A TIMESTAMP in the Azure format (7 fractional digits) and its offset in ns."""
    t = base + timedelta(microseconds=offset_100ns // 10)
    return f"{t:%Y-%m-%d %H:%M:%S}.{t.microsecond:06d}{offset_100ns % 10}", offset_100ns * 100


azure_rows = st.lists(st.tuples(st.integers(0, 10**11), st.integers(1, 10**6),
                                st.integers(1, 10**5)), min_size=1, max_size=12)
BASE = datetime(2023, 11, 16, 18, 15, 46)


@FAST
@given(azure_rows)
def test_azure_round_trip(scratch, rows):
    stamps = [_azure_time(BASE, t) for t, _, _ in rows]
    lines = [f"{s},{c},{g}" for (s, _), (_, c, g) in zip(stamps, rows)]
    path = write(scratch, [AZURE_HEADER] + lines)
    order = sorted(range(len(rows)), key=lambda i: stamps[i][1])
    t0 = stamps[order[0]][1]
    expected = [TraceRequest((stamps[i][1] - t0) / 10**9, rows[i][1], rows[i][2], ())
                for i in order]
    assert load_azure(path) == expected


@st.composite
def bad_azure_row(draw):
    stamp, c, g = _azure_time(BASE, draw(st.integers(0, 10**9)))[0], "5", "7"
    which = draw(st.sampled_from(["stamp", "ctx", "gen", "count"]))
    if which == "stamp":
        stamp = draw(st.sampled_from(["", "yesterday", "2023-13-01 00:00:00", "2023-11-16",
                                      "2023-11-16 25:00:00.1", "1700000000", "2023-11-16 1:2:3"]))
    elif which == "count":
        return draw(st.sampled_from([stamp, f"{stamp},{c}", f"{stamp},{c},{g},1", f"{stamp},,,"]))
    else:
        bad = draw(st.sampled_from(["", "0", "-3", "1.5", "x", "1e3", "٣"]))
        c, g = (bad, g) if which == "ctx" else (c, bad)
    return f"{stamp},{c},{g}"


@FAST
@given(azure_rows, st.one_of(bad_azure_row(), garbage_line.filter(lambda s: s.count(",") != 2)),
       st.data())
def test_azure_garbage_line_is_named(scratch, rows, garbage, data):
    lines = [f"{_azure_time(BASE, t)[0]},{c},{g}" for t, c, g in rows]
    at = data.draw(st.integers(0, len(lines)))
    lines.insert(at, garbage)
    path = write(scratch, [AZURE_HEADER] + lines)
    with pytest.raises(BadInput) as e:
        load_azure(path)
    msg = str(e.value)
    assert msg.startswith(f"trace {path}:{at + 2}: ") and "\n" not in msg


@pytest.mark.parametrize("row, needle", [
    ("2023-11-16 18:15:47.1,5", "expected 3 fields, got 2"),
    ("2023-11-16 18:15:47.1,5,7,", "expected 3 fields, got 4"),
    ("2023-11-16 18:15:47.1,5,1.5", "GeneratedTokens is not an integer: '1.5'"),
    ("2023-11-16 18:15:47.1,0,7", "ContextTokens must be >= 1, got 0"),
    ("2023-11-31 18:15:47.1,5,7", "TIMESTAMP '2023-11-31 18:15:47.1' is not a date-time"),
    ('"2023-11-16 18:15:47.1,5,7', "expected 3 fields, got 1"),   # stray quote stays on its line
])
def test_azure_line_errors(tmp_path, row, needle):
    path = tmp_path / "t.csv"
    path.write_text("\n".join([AZURE_HEADER, "2023-11-16 18:15:46.6805900,374,44", row,
                               "2023-11-16 18:15:48.0,1,1"]))
    with pytest.raises(BadInput) as e:
        load_azure(path)
    assert str(e.value).startswith(f"trace {path}:3: ") and needle in str(e.value)


def test_azure_header_order_crlf_and_long_fractions(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbfGeneratedTokens, TIMESTAMP ,ContextTokens\r\n"
                     b"7,2023-11-16T18:15:46.123456789123,5\r\n\r\n8,2023-11-16 18:15:46,6\r\n")
    assert load_azure(path) == [TraceRequest(0.0, 6, 8, ()), TraceRequest(0.123456789, 5, 7, ())]


def test_azure_bad_utf8_and_nul_are_named(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     b"2023-11-16 18:15:46.1,1,1\n\xff\xfe,1,1\n")
    with pytest.raises(BadInput, match=f"{path}:3: not UTF-8"):
        load_azure(path)
    path.write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,1\x00,1\n")
    with pytest.raises(BadInput, match=f"{path}:2: "):
        load_azure(path)
