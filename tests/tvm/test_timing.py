"""time_builds, Ratio and compare_builds: interleaved rounds whose order rotates, comparisons paired
round by round, and close calls timed again."""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("tvm")  # timing runs builds through TVM's VM (faked here, but imported)

import layoutopt.tvm.evaluate.timing as timing
from layoutopt.tvm.evaluate.timing import Noise, Ratio


class _FakeVM:
    """Stands for a Relax VM: its timer appends the build's name to a shared log and answers the
    next of ``times`` (default: the log's length)."""

    def __init__(self, name: str, log: list[str], times=None) -> None:
        self.name, self.log, self.times = name, log, times

    def __getitem__(self, _function):
        return lambda *args: None  # the warm-up run

    def time_evaluator(self, *_args, **_kwargs):
        def timer(*_args):
            self.log.append(self.name)
            value = next(self.times) if self.times is not None else len(self.log)
            return type("Result", (), {"results": [value]})()

        return timer


@pytest.fixture
def fake_builds(monkeypatch):
    """Builds named by their times: ``{"a": [1.0, 1.2], ...}`` cycles through those seconds."""
    log: list[str] = []
    monkeypatch.setattr(timing, "_device_args", lambda inputs, device: [])

    def install(times: dict[str, list[float]] | None = None):
        cycles = {name: itertools.cycle(values) for name, values in (times or {}).items()}
        monkeypatch.setattr(timing, "_virtual_machine",
                            lambda build, runner: (_FakeVM(build, log, cycles.get(build)), None))
        return log

    return install


def test_each_round_starts_one_build_further_on(fake_builds):
    log = fake_builds()
    samples = timing.time_builds({"a": "a", "b": "b", "c": "c"}, [], repeat=4)
    assert log == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]
    assert {name: len(values) for name, values in samples.items()} == {"a": 4, "b": 4, "c": 4}
    assert samples["b"] == [2, 4, 9, 11]  # each build's samples (positions in the log), in round order


def test_contenders_outside_tvm_take_their_turn_in_the_same_rounds(fake_builds):
    log = fake_builds()
    samples = timing.time_builds({"a": "a"}, [], repeat=2, others={"ort": lambda: log.append("ort") or 0.5})
    assert log == ["a", "ort", "ort", "a"]
    assert samples["ort"] == [0.5, 0.5]


def test_a_ratio_pairs_rounds_so_that_drift_common_to_both_cancels():
    # the machine slows down 1.5x halfway; b is always 10 % slower than a in the same round
    a = [1.0] * 10 + [1.5] * 10
    b = [1.1 * x for x in a]
    ratio = Ratio.of(b, a)
    assert ratio.median == pytest.approx(1.1) and ratio.low == pytest.approx(1.1) and ratio.settled
    # the medians alone cannot say it: b's lower half overlaps a's upper half
    assert max(a) > min(b)


def test_the_interval_of_the_median_narrows_with_rounds_and_contains_it():
    noisy = [1.0 + 0.1 * ((7 * i) % 11 - 5) / 5 for i in range(200)]  # 0.9..1.1, deterministic
    few, many = Ratio.of(noisy[:10], [1.0] * 10), Ratio.of(noisy, [1.0] * 200)
    for ratio in (few, many):
        assert ratio.low <= ratio.median <= ratio.high
    assert many.high - many.low < few.high - few.low
    assert not many.settled  # centred on 1: a tie


def test_compare_builds_times_every_build_again_when_a_pair_is_close(fake_builds):
    log = fake_builds({"ref": [1.0], "slow": [2.0], "close": [0.9, 1.1, 1.0]})
    samples, ratios = timing.compare_builds({"ref": "ref", "slow": "slow", "close": "close"}, [], "ref",
                                            repeat=6)
    assert set(ratios) == {"slow", "close"}
    assert ratios["slow"].settled and ratios["slow"].median == 2.0
    assert not ratios["close"].settled and ratios["close"].rounds == 12  # timed again, twice the rounds
    extra = log[18:]  # after the 6 rounds of three builds: 6 more rounds of all three
    assert sorted(set(extra)) == ["close", "ref", "slow"] and len(extra) == 18
    assert {name: len(values) for name, values in samples.items()} == {"ref": 12, "slow": 12, "close": 12}


def test_every_latency_comes_from_the_rounds_of_its_ratio(fake_builds):
    # the reference's first rounds run in a slow episode, the close build's extra rounds in a calm one:
    # taking the reference's median from its first rounds alone made a build 1.2x ahead read 0.6x
    fake_builds({"ref": [2.0] * 5 + [1.0] * 5, "close": [1.0, 1.1, 0.9, 1.0, 1.0]})
    samples, ratios = timing.compare_builds({"ref": "ref", "close": "close"}, [], "ref", repeat=5)
    assert len(samples["ref"]) == len(samples["close"]) == ratios["close"].rounds
    assert ratios["close"] == Ratio.of(samples["close"], samples["ref"])


def test_noise_counts_the_rounds_every_build_ran_slow():
    calm = [1.0] * 8
    samples = {"a": [*calm, 1.4, 1.0], "b": [*(2 * x for x in calm), 2.6, 2.0], "c": [*calm, 1.3, 1.5]}
    noise = Noise.of(samples)
    assert noise.rounds == 10 and noise.episodes == 1  # round 8: all three; round 9: c alone
    assert "1 round(s)" in noise.describe()


def test_compare_builds_names_a_missing_reference():
    with pytest.raises(ValueError, match="'tuned' is not among the builds"):
        timing.compare_builds({"a": "a"}, [], "tuned")
