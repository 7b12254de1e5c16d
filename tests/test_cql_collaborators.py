"""The client's parts take their collaborators explicitly (python-driver's style): no mixins, and
no part reads another object's private attributes but the driver's, which have their own
contract test (tests/test_driver_contract.py)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.test_driver_contract import DRIVER_PRIVATE_NAMES

pytestmark = pytest.mark.fast

CLIENT = Path(__file__).parent.parent / "resources" / "stores" / "cql"


def _modules():
    return sorted(CLIENT.glob("*.py"))


def test_no_class_of_the_client_is_built_from_mixins():
    mixed = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and len(node.bases) > 1:
                mixed.append(f"{path.name}: class {node.name}({', '.join(ast.unparse(b) for b in node.bases)})")
    assert not mixed, "classes with more than one base (pass collaborators instead): " + "; ".join(mixed)


def test_no_part_of_the_client_reads_another_objects_private_attributes():
    """``x._name`` only on ``self`` (or ``cls``), or a driver name the contract test checks."""
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            name = node.attr
            if not name.startswith("_") or name.startswith("__") or name in DRIVER_PRIVATE_NAMES:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "private attributes read across objects: " + "; ".join(found)


def test_the_store_is_one_class_over_the_store_interface():
    from asgard.resources.stores.base import ObjectStore
    from asgard.resources.stores.cql import CassandraObjectStore

    assert CassandraObjectStore.__bases__ == (ObjectStore,)
