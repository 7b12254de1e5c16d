"""Apache Cassandra, installed and run by the project.

``install`` fetches the pinned ``cassandra-all`` jar and its dependencies with Maven;
``config`` renders ``cassandra.yaml`` from defaults plus knob overrides; ``node`` runs one
instance (optionally NUMA-pinned) and ``cluster`` several on 127.0.0.i as one ring;
``nodetool`` wraps ``org.apache.cassandra.tools.NodeTool`` from the same jar.
"""
from .cluster import CassandraCluster
from .config import render_config
from .install import CASSANDRA_VERSION, install
from .node import CassandraNode

__all__ = ["CassandraCluster", "CassandraNode", "install", "render_config", "CASSANDRA_VERSION"]
