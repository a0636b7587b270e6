"""From a chosen assignment to a built module: the rewrite (``apply``), the build and its
legalizations (``builder``), the storage plan, the fixed-layout baselines and the memory estimate.

Floor 5 of ``layoutopt.tvm`` (``building``, not ``build``: ``layoutopt.tvm.build`` is the public
function): imports only lower floors.
"""
