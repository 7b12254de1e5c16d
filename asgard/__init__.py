"""The project's own namespace: ``asgard.resources`` (the store interface, its backends and the
servers the project runs), ``asgard.tuner`` (free of Dagster and Airflow) and ``asgard.pipelines``
(the seed applications).

They live at the repository's top level (``resources/``, ``tuner/``, ``pipelines/``) and the wheel
installs them under this package (``setup.py``'s package mapping), so that a user's own
``resources.py`` or ``pipelines/`` -- common names in Dagster projects -- can never shadow them.
In a source checkout, this package also finds them at the repository's top level.
"""
import os as _os

_here = _os.path.dirname(_os.path.abspath(__file__))
_root = _os.path.dirname(_here)
# a source checkout (setup.py beside this package, the packages not installed inside it)
if not _os.path.isdir(_os.path.join(_here, "resources")) and _os.path.isfile(_os.path.join(_root, "setup.py")):
    __path__.append(_root)  # noqa: F821 (a package's __path__)
