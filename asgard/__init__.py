"""The project's own namespace: ``asgard.resources`` (the client in ``asgard.resources.stores``,
and the servers the project runs), ``asgard.tuner`` (free of Dagster and Airflow),
``asgard.pipelines`` (the paper's applications) and ``asgard.cli`` (the ``asgard`` command).

In a checkout, ``asgard/resources``, ``asgard/tuner`` and ``asgard/pipelines`` are symbolic links to
the repository's top-level folders, so tools that walk a package's folder (import-linter, IDEs) find
every module where its name says; the wheel installs the folders themselves under this package
(``setup.py``'s ``package_dir``), so a user's own ``resources.py`` or ``pipelines/`` never shadows them.
"""
