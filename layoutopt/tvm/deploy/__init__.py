"""Solution files, rebuilding a model from one, and exporting the built library.

Floor 7 of ``layoutopt.tvm``: imports only lower floors.
"""
