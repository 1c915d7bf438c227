"""Pipeline stages, one verb per module."""
