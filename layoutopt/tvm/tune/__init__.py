"""``tune_and_build``: its stages and their records, the guard, the result and the report.

Floor 8 of ``layoutopt.tvm``: imports only lower floors (``cli`` alone sits above).
"""
