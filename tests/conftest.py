"""Suite-wide test settings. The shared hypothesis strategies live in ``strategies.py``."""

from hypothesis import settings

# Solvers have cold starts (imports, first model build) far above hypothesis' 200 ms default deadline.
settings.register_profile("layoutopt", deadline=None)
settings.load_profile("layoutopt")
