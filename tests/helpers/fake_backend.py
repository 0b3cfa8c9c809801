"""Kept for branches made before the fake became ``accelrt.testing.SimulatedBackend``: import that."""
from accelrt.testing import SimulatedBackend as FakeBackend  # noqa: F401
