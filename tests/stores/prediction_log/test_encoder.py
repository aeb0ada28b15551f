"""The encoder process: the same lines as encoding in process, in another process, and never a record lost to it.

The child is the real one (`python -m shared.stores.prediction_log.encoder`, started by the log);
its failures are real too: killed, stopped (SIGSTOP) past the reply's deadline, a frame too big
for the shared memory, the writer cancelled while it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.domain.answers import ReasonCode, Review
from shared.domain.records import DecisionRecord, encode_records
from shared.settings import PredictionLogPolicy
from shared.stores.prediction_log import encoder
from shared.stores.prediction_log.encoder import ProcessEncoder, encode_packed, pack, wanted
from shared.stores.prediction_log.log import PredictionLog
from shared.stores.prediction_log.sinks import DirectorySink
from tests.domain.test_records_properties import chunks
from tests.stores.prediction_log import balanced, decision, eventually

POLICY = PredictionLogPolicy(sink="dir", flush_s=0.05, close_s=2.0, encoder="process")
NO_ROW = np.zeros(0, dtype=np.float32)


def outcome(i: int) -> DecisionRecord:
    """A review's later outcome, as the core logs it: no columns, no row, the Review with the raw id."""
    review = Review("done", f"evt-{i}", risk_score=0.91, rationale="card testing: many small amounts")
    return DecisionRecord(0.0, "review", f"evt-{i}", "fraud", "3", "9f2c41d7e0ab", (), NO_ROW, {}, 0.91,
                          "decline", "review: decline", {}, review)  # fmt: skip


def mixed() -> list[DecisionRecord]:
    """Decisions with reasons and defaulted views, outcomes between them (runs of other columns)."""
    records = [decision(i) for i in range(6)]
    records[1].reasons = [ReasonCode("amount", 121.5, 0.0, 0.42), ReasonCode("is_foreign", 1.0, 0.0, 0.1)]
    records[2].defaulted = types.MappingProxyType({"merchant_risk": "stale"})
    records[3].defaulted = types.MappingProxyType({})
    return [*records[:3], outcome(1), *records[3:], outcome(4), outcome(5)]


def lines(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(path.rglob("*.jsonl")))


@settings(max_examples=200, deadline=None)
@given(chunks(), st.sampled_from([b"", b"chargebacks-2026"]))
def test_a_packed_chunk_encodes_byte_for_byte_as_in_process(records: list[DecisionRecord], key: bytes) -> None:
    # NOTE: the property test's chunks: odd floats, other column sets, odd event ids, shadows, arms
    assert encode_packed(pack([records, records[:1]]), key) == encoder._encode_frame(
        [encode_records(records, key), encode_records(records[:1], key)]
    )


def test_outcomes_reviews_reasons_and_defaulted_views_encode_as_in_process() -> None:
    records = mixed()
    assert encoder._decode_reply(encode_packed(pack([records]), b"k")) == [encode_records(records, b"k")]


def test_each_record_keeps_its_model_version_and_fingerprint_where_they_change_within_a_group() -> None:
    """A run packs what its records share once: a change of any of them starts a new run."""
    records = [decision(i) for i in range(7)]
    records[1].fingerprint = records[2].fingerprint = "0b1d5e77aa10"  # NOTE: a version re-uploaded mid-batch
    records[4].version, records[5].model = "4", "chargebacks"
    assert encoder._decode_reply(encode_packed(pack([records]), b"k")) == [encode_records(records, b"k")]


def test_the_child_makes_one_row_struct_per_column_list_however_many_requests() -> None:
    """Each request decodes its own tuple of column names; a row struct (a class, cyclic, freed only
    by a full collection the child rarely runs) per request grew the child ~10 MiB a minute."""
    from shared.domain import records as records_module

    records = [decision(i) for i in range(4)]
    frame, names = pack([records]), tuple(records[0].columns)
    made: list[set[int]] = []
    for _ in range(50):
        encode_packed(frame, b"k")
        made.append({id(kind) for columns, kind in records_module._ROWS.values() if tuple(columns) == names})
    assert made[-1] == made[0] and len(set().union(*made)) == len(made[0])  # the first request's, and no other


def test_a_group_that_will_not_pack_or_encode_comes_back_none_and_the_others_whole() -> None:
    bad_row = decision(1, columns=("amount",))  # NOTE: six floats for one column: not packed
    unencodable = decision(2)
    unencodable.timings = {"parse": object()}  # type: ignore[dict-item]
    good = [decision(3), decision(4)]
    reply = encoder._decode_reply(encode_packed(pack([[bad_row], good, [unencodable]]), b""))
    assert reply == [None, encode_records(good), None]


async def test_the_log_writes_through_another_process_what_it_writes_inline(tmp_path: Path) -> None:
    records = mixed() * 100  # NOTE: 900 records: several frames of CHUNK_ELSEWHERE
    logs = {}
    for name, choice in (("process", "process"), ("inline", "inline")):
        log = PredictionLog(
            PredictionLogPolicy(sink="dir", encoder=choice), DirectorySink(tmp_path / name, "r1"), replica="r1"
        )
        for record in records:
            log.add(record)
        await log.flush()
        logs[name] = log
    child = logs["process"]._encoder._child.process  # type: ignore[union-attr]
    assert child is not None and child.pid != os.getpid() and child.poll() is None
    assert lines(tmp_path / "process") == lines(tmp_path / "inline") and lines(tmp_path / "inline").count(b"\n") == 900
    assert logs["process"].stats().encoder == "process" and logs["inline"].stats().encoder == "inline"
    for log in logs.values():
        await log.aclose()
    assert child.poll() == 0  # NOTE: it exits at the end of its stdin: nothing outlives the log


async def test_a_killed_child_loses_nothing_and_a_new_one_takes_over_after_restart_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PredictionLog(POLICY, DirectorySink(tmp_path, "r1"), replica="r1")
    log.add(decision(0))
    await log.flush()
    first = log._encoder._child.process  # type: ignore[union-attr]
    assert first is not None
    first.kill()
    first.wait()
    for i in range(1, 300):
        log.add(decision(i))
    await log.flush()
    stats = log.stats()
    assert stats.written == 300 and balanced(stats)
    assert stats.encoder.startswith("inline for now (the encoder process failed: ")  # NOTE: a broken pipe, or EOF
    assert len(lines(tmp_path).splitlines()) == 300
    monkeypatch.setattr(log._encoder, "_down_until", 0.0)  # NOTE: RESTART_S passed
    log.add(decision(300))
    await log.flush()
    second = log._encoder._child.process  # type: ignore[union-attr]
    assert second is not None and second.pid != first.pid and log.stats().encoder == "process"
    assert log.stats().written == 301
    await log.aclose()


async def test_a_child_that_does_not_answer_in_time_is_stopped_and_the_chunk_encoded_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = PredictionLog(POLICY, DirectorySink(tmp_path, "r1"), replica="r1")
    log.add(decision(0))
    await log.flush()  # NOTE: started and answered once: REPLY_S from now on
    child = log._encoder._child.process  # type: ignore[union-attr]
    assert child is not None
    monkeypatch.setattr(encoder, "REPLY_S", 0.2)
    os.kill(child.pid, signal.SIGSTOP)
    try:
        for i in range(1, 50):
            log.add(decision(i))
        await asyncio.wait_for(log.flush(), 5.0)
    finally:
        with contextlib.suppress(ProcessLookupError):  # NOTE: killed and reaped, as it should be
            os.kill(child.pid, signal.SIGCONT)
    assert log.stats().written == 50 and balanced(log.stats())
    assert "TimeoutError" in log.stats().encoder
    assert child.wait(5) == -signal.SIGKILL
    await log.aclose()


async def test_a_reply_too_big_for_the_shared_memory_is_encoded_here_and_the_child_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(encoder, "SHARED_BYTES", encoder.REQUEST_BYTES + 1024)  # NOTE: a reply of a few lines fits
    log = PredictionLog(POLICY, DirectorySink(tmp_path, "r1"), replica="r1")
    log.add(decision(0))
    await log.flush()
    child = log._encoder._child.process  # type: ignore[union-attr]
    for i in range(1, 200):  # NOTE: ~100 KB of lines
        log.add(decision(i))
    await log.flush()
    assert log.stats().written == 200 and log.stats().encoder == "process"
    assert log._encoder._child.process is child and child is not None and child.poll() is None  # type: ignore[union-attr]
    assert len(lines(tmp_path).splitlines()) == 200
    await log.aclose()


async def test_a_writer_cancelled_while_the_child_answers_loses_nothing(tmp_path: Path) -> None:
    log = PredictionLog(POLICY, DirectorySink(tmp_path, "r1"), replica="r1")
    log.add(decision(0))
    await log.flush()
    child = log._encoder._child.process  # type: ignore[union-attr]
    assert child is not None
    os.kill(child.pid, signal.SIGSTOP)  # NOTE: it holds the next frame unanswered until the cancel
    try:
        for i in range(1, 100):
            log.add(decision(i))
        writer = asyncio.get_running_loop().create_task(log.flush())
        await eventually(lambda: not log._records, what="the writer took the records")
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGCONT)
    await log.aclose()
    assert log.stats().written == 100 and balanced(log.stats())
    assert len(lines(tmp_path).splitlines()) == 100


@pytest.mark.parametrize(
    ("cpu_max", "choice", "expected"),
    [
        ("max 100000", "auto", True),  # NOTE: no quota: the cores it may run on (two or more here)
        ("200000 100000", "auto", True),
        ("100000 100000", "auto", False),  # NOTE: a replica of one vCPU: the child would take the loop's CPU
        ("50000 100000", "auto", False),
        ("50000 100000", "process", True),
        ("max 100000", "inline", False),
    ],
)
def test_auto_takes_a_process_only_where_the_cgroup_leaves_a_second_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpu_max: str, choice: str, expected: bool
) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU here: auto is inline whatever the quota")
    (tmp_path / "cpu.max").write_text(cpu_max + "\n")
    monkeypatch.setattr(encoder, "CPU_MAX", tmp_path / "cpu.max")
    assert wanted(choice) is expected


async def test_an_encoder_never_started_closes_at_once() -> None:
    found: Any = ProcessEncoder(b"")
    await found.aclose()
    assert found.state == "process"
