"""The catalog's data files through gpuplan/datafiles.py (the loader sits below the engine, which
reads its own tables with it); kept so `gpuplan.catalog.compiled` names stay importable."""

from gpuplan.datafiles import DATA, _parse, load_data

__all__ = ["DATA", "_parse", "load_data"]
