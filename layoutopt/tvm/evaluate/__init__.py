"""Judging builds: the output check, latency timing, the in-network profile, calibration, and the
check of TVM's import against a runtime independent of TVM.

Floor 6 of ``layoutopt.tvm``: imports only lower floors.
"""
