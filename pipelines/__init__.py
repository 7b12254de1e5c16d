"""The paper's applications as Dagster jobs whose op outputs go through the ``io_manager``
resource: Video Analytics (scatter, Asgard §3.1.1), the LightGBM forest (broadcast, Asgard
§3.1.2) and word count (shuffle, Marvel §4.2). See :mod:`asgard.pipelines.jobs`.
"""
