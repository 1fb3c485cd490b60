"""Name lookup with a 'did you mean' (gpuplan/lookup.py, below the engine); kept so the
catalog's `gpuplan.catalog.lookup` names stay importable."""

from gpuplan.lookup import did_you_mean, normalise

__all__ = ["did_you_mean", "normalise"]
