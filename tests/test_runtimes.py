"""benchmarks.runtimes: engines timed side by side (fake engines: no TVM build, no runtime needed), its
engine processes' errors (ONNX Runtime, from the dev extra), and the cells real_models.py makes of its
results."""

from __future__ import annotations

import doctest
import json

import numpy as np
import pytest

from benchmarks import real_models, runtimes
from benchmarks.runtimes import RuntimeServer, SideBySide, start_engines, time_side_by_side
from layoutopt import ProblemError
from layoutopt.machine import cpu_model


class FakeEngine:
    """Times programmed in advance: ``rounds[i]`` are the seconds of the runs of its i-th call (then
    ``seconds`` a run); every call lands in the shared ``log``."""

    def __init__(self, name, log, rounds=None, outputs=None, seconds=1.0):
        self.name, self.log, self.rounds, self.seconds = name, log, list(rounds or []), seconds
        self._outputs = outputs if outputs is not None else [np.ones((1, 4))]

    def time(self, runs):
        self.log.append((self.name, runs))
        return self.rounds.pop(0) if self.rounds else [self.seconds] * runs

    def outputs(self):
        return self._outputs


def _loads(*values):
    """A fake os.getloadavg answering each value in turn (then the last one forever)."""
    answers = list(values)

    def loadavg():
        return (answers.pop(0) if len(answers) > 1 else answers[0], 0.0, 0.0)

    return loadavg


def test_warm_up_then_rounds_in_rotated_order_each_engine_its_runs(monkeypatch):
    log = []
    engines = {name: FakeEngine(name, log) for name in ("so", "onnxruntime", "openvino")}
    result = time_side_by_side(engines, rounds=4, runs=7, warmup=3, loadavg=_loads(0.1))
    assert log[:3] == [("so", 3), ("onnxruntime", 3), ("openvino", 3)]  # warm-up: 3 runs each, first
    timed = [name for name, runs in log[3:]]
    assert all(runs == 7 for _, runs in log[3:])
    assert timed == ["so", "onnxruntime", "openvino", "onnxruntime", "openvino", "so",
                     "openvino", "so", "onnxruntime", "so", "onnxruntime", "openvino"]
    assert result.rounds == 4 and result.runs == 7 and result.warmup == 3


def test_a_rounds_sample_is_the_median_of_its_runs_and_the_ratio_is_paired_round_by_round():
    log = []
    # the host slows down in rounds 3 and 4, for "so" (2.4x) more than for ORT (2x)
    so = FakeEngine("so", log, rounds=[[1.0, 9.0, 0.9], [1.0, 1.1, 0.1], [2.4] * 3, [2.4, 50.0, 2.3]])
    ort = FakeEngine("onnxruntime", log, rounds=[[1.25, 1.25, 1.2], [1.25, 1.3, 1.2], [2.5] * 3,
                                                 [2.5, 2.6, 2.4]])
    result = time_side_by_side({"so": so, "onnxruntime": ort}, rounds=4, runs=3, warmup=0,
                               loadavg=_loads(0.1))
    assert result.seconds["so"] == [1.0, 1.0, 2.4, 2.4]  # medians: an outlier run does not count
    assert result.seconds["onnxruntime"] == [1.25, 1.25, 2.5, 2.5]
    assert result.latency("so").median == pytest.approx(1.7)
    speedup = result.speedup("so", over="onnxruntime")
    # the median of the per-round ratios 1.25, 1.25, 1.042, 1.042; not the ratio of medians (1.103)
    assert speedup.median == pytest.approx((1.25 + 2.5 / 2.4) / 2)
    assert speedup.low <= speedup.median <= speedup.high and speedup.rounds == 4
    assert result.speedup("onnxruntime", over="so").median == pytest.approx(0.88)
    with pytest.raises(ValueError, match="no engine 'openvino' was timed; timed: so, onnxruntime"):
        result.speedup("so", over="openvino")


def test_each_engines_outputs_are_checked_against_the_reference_and_a_mismatch_is_named():
    log = []
    reference = [np.array([[1.0, 2.0, 4.0]])]
    engines = {"so": FakeEngine("so", log, outputs=[np.array([[1.0, 2.0, 4.2]])]),
               "onnxruntime": FakeEngine("onnxruntime", log, outputs=reference),
               "openvino": FakeEngine("openvino", log, outputs=reference)}
    result = time_side_by_side(engines, rounds=1, runs=1, loadavg=_loads(0.0))
    assert result.errors == pytest.approx({"so": 0.05, "openvino": 0.0}) and result.reference == "onnxruntime"
    engines["openvino"] = FakeEngine("openvino", log, outputs=[np.ones((1, 4))])
    mismatch = (r"openvino's outputs do not compare with onnxruntime's: output 0's shape \(1, 4\) differs "
                r"from the reference's \(1, 3\)")
    with pytest.raises(ProblemError, match=mismatch):
        time_side_by_side(engines, rounds=1, runs=1, loadavg=_loads(0.0))
    alone = time_side_by_side({"so": engines["so"]}, rounds=1, runs=1, loadavg=_loads(0.0))
    assert alone.errors == {} and alone.reference is None


def test_the_load_is_stamped_before_and_after_and_waited_for_after_a_tuning():
    slept = []
    log = []
    engines = {"so": FakeEngine("so", log)}
    # our own tuning just ended: 3.1, 2.6, then 1.9 after two 5-s polls; 0.7 after the rounds
    result = time_side_by_side(engines, rounds=2, runs=1, max_load=2, settle=60,
                               loadavg=_loads(3.1, 2.6, 1.9, 0.7), sleep=slept.append)
    assert slept == [5.0, 5.0]
    assert (result.load_before, result.load_after) == (1.9, 0.7)
    assert result.publishable and result.refusal is None
    assert cpu_model() in result.stamp["machine"] and result.stamp["date"]  # the CPU is named


def test_a_busy_machine_is_refused_before_or_after():
    log = []
    slept = []
    busy = time_side_by_side({"so": FakeEngine("so", log)}, rounds=1, runs=1, max_load=2, settle=12,
                             loadavg=_loads(3.5), sleep=slept.append)
    assert slept == [5.0, 5.0, 2.0]  # it waited its 12 s, no longer
    assert not busy.publishable
    assert busy.refusal == ("load average 3.5 before and 3.5 after the rounds, above 2: not for "
                            "publishing")
    after = time_side_by_side({"so": FakeEngine("so", log)}, rounds=1, runs=1, max_load=2,
                              loadavg=_loads(1.0, 2.4))
    assert after.refusal == "load average 2.4 after the rounds, above 2: not for publishing"
    assert time_side_by_side({"so": FakeEngine("so", log)}, rounds=1, runs=1, max_load=2,
                             loadavg=_loads(2.0)).publishable  # "above 2", not "at 2"


def _clock(*readings):
    """A fake cpu_clock answering ``(now, machine busy s, ours s)`` in turn."""
    answers = list(readings)
    return lambda pids: answers.pop(0)


def test_other_processes_cpu_during_the_rounds_decides_not_the_load_after_them():
    """The load after long rounds counts the engines' own threads (2.05 after DBNet 640's on a quiet
    host): with the others' CPU time known, only that, and the load before, refuse a result."""
    quiet = time_side_by_side({"so": FakeEngine("so", [])}, rounds=1, runs=1, max_load=2,
                              loadavg=_loads(1.0, 2.4), cpu_clock=_clock((0, 100.0, 5.0), (10, 120.0, 24.5)))
    assert quiet.others_cores == 0.05 and quiet.publishable  # 20 s busy, 19.5 of them the engines'
    shared = time_side_by_side({"so": FakeEngine("so", [])}, rounds=1, runs=1, max_load=2,
                               loadavg=_loads(1.0, 1.2), cpu_clock=_clock((0, 100.0, 5.0), (10, 126.0, 25.0)))
    assert shared.others_cores == 0.6
    assert shared.refusal == ("other processes took 0.6 cores during the rounds, above 0.25: not for "
                              "publishing")
    assert "other processes 0.60 cores" in "\n".join(runtimes.markdown(shared, "so"))
    for clock in (lambda pids: None, _clock((0, 100.0, 5.0), (0.5, 100.5, 5.0))):  # no /proc; too short
        unknown = time_side_by_side({"so": FakeEngine("so", [])}, rounds=1, runs=1, max_load=2,
                                    loadavg=_loads(1.0, 2.4), cpu_clock=clock)
        assert unknown.others_cores is None
        assert unknown.refusal == "load average 2.4 after the rounds, above 2: not for publishing"


def test_an_engines_own_cpu_time_counts_as_the_rounds_not_as_others():
    class Spinning(FakeEngine):
        def time(self, runs):
            end = runtimes.time.process_time() + 0.6
            while runtimes.time.process_time() < end:
                pass
            return [0.6] * runs

    seen = []

    def clock(pids):
        seen.append((list(pids), runtimes.cpu_seconds(pids)))
        return seen[-1][1]

    result = time_side_by_side({"so": Spinning("so", [])}, rounds=2, runs=1, warmup=0, max_load=2,
                               loadavg=_loads(0.0), cpu_clock=clock)
    (pids, start), (_, end) = seen
    assert pids == [runtimes.os.getpid()]  # an in-process engine has no pid of its own
    assert end[2] - start[2] >= 1.15  # the 1.2 s of spinning, ours (the clock ticks in 1/100 s)
    assert end[1] - start[1] >= end[2] - start[2] - 0.05  # and inside the machine's busy time
    assert result.others_cores is not None and result.others_cores >= 0


def test_what_an_engine_burns_between_its_turns_is_measured(monkeypatch):
    """A runtime whose threads spin after its runs slows the engine timed next: each engine in a
    process of its own gets its CPU outside its turns measured."""
    spinner = runtimes.subprocess.Popen([runtimes.sys.executable, "-c", "while True: pass"])
    try:
        class Spinning(FakeEngine):  # its process spins all along, in its turns and out of them
            pid = spinner.pid

            def time(self, runs):
                runtimes.time.sleep(0.3)
                return [0.3] * runs

        class Quiet(FakeEngine):
            def time(self, runs):
                runtimes.time.sleep(0.3)
                return [0.3] * runs

        waits = []

        def sleep(seconds):
            waits.append(seconds)
            runtimes.time.sleep(seconds)

        monkeypatch.setattr(runtimes, "IDLE_WAIT_SECONDS", 0.2)
        result = time_side_by_side({"spinning": Spinning("spinning", []), "quiet": Quiet("quiet", [])},
                                   rounds=4, runs=1, warmup=0, max_load=2, loadavg=_loads(0.0),
                                   cpu_clock=_clock((0, 0.0, 0.0), (2.4, 4.8, 4.8)), sleep=sleep)
    finally:
        spinner.kill()
        spinner.wait()
    # after each of its turns the rounds waited for it to go idle, and gave up at the longest wait
    assert len(waits) == 4 * 4 and set(waits) == {0.05}
    assert list(result.idle_cores) == ["spinning"]  # an in-process engine has no process to watch
    assert result.idle_cores["spinning"] > 0.5  # about one core, less what the host lends elsewhere
    assert "the engines between their turns (cores): spinning" in runtimes.others_text(result)
    assert SideBySide.from_dict(json.loads(json.dumps(result.as_dict()))) == result


def test_the_next_turn_waits_for_an_engine_to_go_idle():
    """A process that spins for 0.15 s after its turn, as TVM's thread pool does: the wait ends once
    it has gone idle, well before the longest wait."""
    code = ("import sys, time\n"
            "for line in sys.stdin:\n"
            "    end = time.monotonic() + 0.15\n"
            "    while time.monotonic() < end: pass\n"
            "    print('done', flush=True)\n")
    child = runtimes.subprocess.Popen([runtimes.sys.executable, "-c", code], stdin=runtimes.subprocess.PIPE,
                                      stdout=runtimes.subprocess.PIPE, text=True)
    try:
        child.stdin.write("go\n")
        child.stdin.flush()
        child.stdout.readline()  # its "turn" is over as it answers; the spinning goes on
        started = runtimes.time.monotonic()
        runtimes.wait_until_idle(child.pid, runtimes.time.sleep)
        waited = runtimes.time.monotonic() - started
        before = runtimes.cpu_seconds([child.pid])[2]
        runtimes.time.sleep(0.1)
        assert runtimes.cpu_seconds([child.pid])[2] == before  # idle when the wait ended
        assert waited < 0.8
    finally:
        child.kill()
        child.wait()


def test_bad_counts_and_no_engine_are_refused():
    with pytest.raises(ValueError, match="at least one engine"):
        time_side_by_side({})
    with pytest.raises(ValueError, match="rounds must be at least 1, not 0"):
        time_side_by_side({"so": FakeEngine("so", [])}, rounds=0)


def test_a_result_survives_json():
    log = []
    result = time_side_by_side({"so": FakeEngine("so", log), "onnxruntime": FakeEngine("onnxruntime", log)},
                               rounds=2, runs=1, loadavg=_loads(0.5), versions={"onnxruntime": "1.32.0"})
    again = SideBySide.from_dict(json.loads(json.dumps(result.as_dict())))
    assert again == result and again.versions == {"onnxruntime": "1.32.0"}


def test_an_engine_that_cannot_load_its_model_is_named_with_its_file(tmp_path):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    with start_engines(broken, [np.zeros((1, 3), "float32")], {}, threads=1,
                       runtimes=("onnxruntime",)) as (engines, failed):
        assert engines == {}
    assert list(failed) == ["onnxruntime"]
    message = failed["onnxruntime"]
    assert message.startswith(f"onnxruntime: loading {broken} failed: ") and "\n" not in message
    with pytest.raises(ValueError, match="unknown engine kind 'tensorrt'"):
        RuntimeServer("tensorrt", broken, tmp_path / "inputs.npz", threads=1)


def test_the_modules_examples_run():  # benchmarks/ is outside pytest's doctest collection
    failures, tried = doctest.testmod(runtimes, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert tried > 0 and failures == 0


# -- the table cells of real_models.py ------------------------------------------------------------


def _row(seconds, load_before=0.3, load_after=0.9, **extra):
    side = SideBySide(seconds, runs=7, warmup=3, load_before=load_before, load_after=load_after, max_load=2.0,
                      errors={"handed_back": 2e-6, "openvino": 3e-7}, reference="onnxruntime", stamp={},
                      versions={})
    return {"side_by_side": side.as_dict(), "best_fixed_member": "nchw16c", **extra}


def test_real_models_cells_show_ms_ratios_errors_and_the_load():
    row = _row({"handed_back": [0.010, 0.012, 0.011], "best_fixed": [0.012, 0.015, 0.0121],
                "onnxruntime": [0.020, 0.024, 0.022], "openvino": [0.011, 0.012, 0.011]})
    cells = real_models.timing_cells(row)
    assert cells[:4] == ["11.00", "12.10 (nchw16c)", "22.00", "11.00"]
    assert cells[4] == "2.00x [2.00-2.00]"  # per-round ratios 2.0, 2.0, 2.0
    assert cells[5] == "1.00x [1.00-1.10]"
    assert cells[6].startswith("1.20x")
    assert cells[7:] == ["2.0e-06 / 3.0e-07", "0.3 / 0.9"]


def test_real_models_cells_say_when_b_star_was_handed_back_a_busy_row_and_an_old_row():
    row = _row({"handed_back": [0.010], "onnxruntime": [0.020], "openvino": [0.03]}, load_before=4.2)
    cells = real_models.timing_cells(row)
    assert cells[1] == "10.00 (nchw16c)" and cells[6] == "1.00x (the same build)"
    assert cells[8] == "4.2 / 0.9 **busy: not for publishing**"
    old = real_models.timing_cells({"tuned": 0.01, "best_fixed": 0.02, "onnxruntime": 0.03})
    assert old[:8] == ["-"] * 8 and "re-run" in old[8]


def test_real_models_cells_name_the_other_processes_cpu():
    row = _row({"handed_back": [0.010], "onnxruntime": [0.020], "openvino": [0.03]}, load_after=2.1)
    row["side_by_side"]["others_cores"] = 0.04
    assert real_models.timing_cells(row)[8] == "0.3 / 2.1; others 0.04"  # quiet: the load after is ours
    row["side_by_side"]["others_cores"] = 0.5
    assert real_models.timing_cells(row)[8] == "0.3 / 2.1; others 0.50 **busy: not for publishing**"


def _tuned_row(tmp_path, **extra):
    builds = tmp_path / "builds"
    builds.mkdir(parents=True)
    for name, content in (("det.so", b"handed back"), ("det.best_fixed.so", b"b*")):
        (builds / name).write_bytes(content)
    row = _row({"handed_back": [0.010], "best_fixed": [0.012], "onnxruntime": [0.020]}, model="det",
               threads=2, timings={"side by side": 40.0},
               stamp={"date": "2026-12-02 10:00 UTC", "machine": real_models.stamp()["machine"]},
               library_digests={"handed_back": real_models._digest(builds / "det.so"),
                                "best_fixed": real_models._digest(builds / "det.best_fixed.so")})
    row.update(extra)
    return row, builds


def test_retime_times_the_rows_own_libraries_again(tmp_path, monkeypatch):
    row, builds = _tuned_row(tmp_path)
    timed = []

    def time_row(row, model_file, libraries, threads, args):
        timed.append((model_file, libraries, threads))
        row["stamp"] = {**row["stamp"], "date": "2026-12-02 11:30 UTC"}

    monkeypatch.setattr(real_models, "time_row", time_row)
    monkeypatch.setattr(real_models, "fetch", lambda model, where: where / "det.onnx")
    monkeypatch.setitem(real_models.MODELS, "det", None)
    monkeypatch.setenv("TVM_NUM_THREADS", "2")
    args = real_models.argparse.Namespace(builds=str(builds), models=str(tmp_path))
    real_models.retime_model(row, args)
    assert timed == [(tmp_path / "det.onnx", {"handed_back": builds / "det.so",
                                              "best_fixed": builds / "det.best_fixed.so"}, 2)]
    assert row["retimed"] == {"date": "2026-12-02 11:30 UTC", "first_timed": "2026-12-02 10:00 UTC"}
    real_models.retime_model(row, args)  # again: still the first timing it remembers
    assert row["retimed"]["first_timed"] == "2026-12-02 10:00 UTC"

    (builds / "det.so").write_bytes(b"another tune's build")
    with pytest.raises(RuntimeError, match=r"det\.so is not the library this row's tune exported"):
        real_models.retime_model(row, args)
    monkeypatch.setenv("TVM_NUM_THREADS", "1")
    with pytest.raises(RuntimeError, match="tuned and timed on 2 threads, not 1"):
        real_models.retime_model(_tuned_row(tmp_path / "b")[0], real_models.argparse.Namespace(
            builds=str(tmp_path / "b" / "builds"), models=str(tmp_path)))
    other = _tuned_row(tmp_path / "c")[0]
    other["stamp"]["machine"] = "Another CPU (x86_64, AVX2)"
    with pytest.raises(RuntimeError, match=r"tuned on Another CPU .* re-tune it here"):
        real_models.retime_model(other, args)


def test_a_row_without_digests_takes_a_library_written_just_before_its_first_timing(tmp_path):
    row, builds = _tuned_row(tmp_path)
    del row["library_digests"]
    library = builds / "det.so"
    ended = real_models.datetime.datetime(2026, 12, 2, 10, 0, tzinfo=real_models.datetime.timezone.utc)
    for offset, accepted in ((-100, True), (-150, True), (-300, False), (+120, False)):
        stamp = ended.timestamp() + offset
        real_models.os.utime(library, (stamp, stamp))
        assert real_models._exported_by(row, "handed_back", library) == accepted, offset
