"""The layout graph: its contract (``LayoutGraph``) and its extraction from a Relax module.

Floor 3 of ``layoutopt.tvm``: imports only lower floors (``frontend``, ``ops``, ``kernels``, ``_tvm``).
"""
