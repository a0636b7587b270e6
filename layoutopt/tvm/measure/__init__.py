"""Measuring costs: where code runs (runners), the measurer and its workers, the cost cache, and
``measure_graph``/``build_problem`` (a layout graph and its measured costs).

Floor 4 of ``layoutopt.tvm``: imports only lower floors.
"""
