"""time_builds: interleaved rounds whose order rotates, so that no build always runs first."""

from __future__ import annotations

import layoutopt.tvm.timing as timing


class _FakeVM:
    """Stands for a Relax VM: its timer appends the build's name to a shared log."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def __getitem__(self, _function):
        return lambda *args: None  # the warm-up run

    def time_evaluator(self, *_args, **_kwargs):
        def timer(*_args):
            self.log.append(self.name)
            return type("Result", (), {"results": [len(self.log)]})()

        return timer


def test_each_round_starts_one_build_further_on(monkeypatch):
    log: list[str] = []
    monkeypatch.setattr(timing, "_virtual_machine", lambda build, runner: (_FakeVM(build, log), None))
    monkeypatch.setattr(timing, "_device_args", lambda inputs, device: [])
    samples = timing.time_builds({"a": "a", "b": "b", "c": "c"}, [], repeat=4)
    assert log == ["a", "b", "c", "b", "c", "a", "c", "a", "b", "a", "b", "c"]
    assert {name: len(values) for name, values in samples.items()} == {"a": 4, "b": 4, "c": 4}
    assert samples["b"] == [2, 4, 9, 11]  # each build's samples (positions in the log), in round order
