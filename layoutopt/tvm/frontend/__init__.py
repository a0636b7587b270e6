"""From a model to the Relax module layoutopt works on: loading files (ONNX, torch.export), the
embedded models, TVM's ONNX import with layoutopt's converters, and ``prepare`` (normalisation).

Floor 2 of ``layoutopt.tvm`` (see README, "Layout of the code"): imports only ``_tvm``, ``kernels``
and ``ops``.
"""
