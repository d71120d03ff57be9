"""The one check of a detection record's association trees, for every reader of records written to disk.

A results file can be edited by hand or come from someone else, so its trees are not trusted to be trees: a parent
cycle would make any walk up the parents (the toxic path, the renderer's layout) loop forever. `check_trees` finds
a malformed node, a repeated id, a dangling parent or a cycle and raises one `TreeError` naming the record, the tree
and the node; the web app and the renderer (`unveil.render`) call it before walking a tree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tools.errors import UnveilError

SIDES = ("visual", "textual")


class TreeError(UnveilError, ValueError):
    """A record's tree is not a tree; the message names the record, the side and the node."""


def record_trees(rec: Mapping[str, Any]) -> Any:
    """The record's trees by side, as written by `unveil detect` (`trees`) or by the graph itself (top level)."""
    trees = rec.get("trees")
    return {side: rec.get(side) or [] for side in SIDES} if trees is None else trees


def check_tree(nodes: object, *, side: str, where: str = "record") -> None:
    """Raise `TreeError` unless `nodes` is a list of node objects with unique string ids, each parent null or an id
    of the same tree, and no parent chain returns to a node it left."""
    if not isinstance(nodes, Sequence) or isinstance(nodes, (str, bytes)):
        raise TreeError(f"{where}: {side} tree: expected a list of nodes, got {type(nodes).__name__}")
    parent: dict[str, Any] = {}
    for k, node in enumerate(nodes):
        if not isinstance(node, Mapping) or not isinstance(node.get("id"), str):
            raise TreeError(f"{where}: {side} tree: node {k} has no string id")
        if node["id"] in parent:
            raise TreeError(f"{where}: {side} tree: node id {node['id']!r} appears twice")
        parent[node["id"]] = node.get("parent")
    for node_id, par in parent.items():
        if par is not None and (not isinstance(par, str) or par not in parent):
            raise TreeError(f"{where}: {side} tree: node {node_id!r} names parent {par!r}, which is not in the tree")
    done: set[str] = set()  # nodes whose chain is known to reach a root
    for start in parent:
        chain: list[str] = []
        seen: set[str] = set()
        cur: str | None = start
        while cur is not None and cur not in done:
            if cur in seen:
                loop = chain[chain.index(cur) :]
                raise TreeError(f"{where}: {side} tree: parent cycle {' -> '.join(map(repr, [*loop, cur]))}")
            seen.add(cur)
            chain.append(cur)
            cur = parent[cur]
        done.update(chain)


def check_trees(rec: Mapping[str, Any]) -> None:
    """Check both trees of a detection record (see `check_tree`); the error names the record's id."""
    where = f"record {rec.get('id')!r}"
    trees = record_trees(rec)
    if not isinstance(trees, Mapping):
        raise TreeError(f"{where}: trees: expected an object with visual and textual lists")
    for side in SIDES:
        check_tree(trees.get(side) or [], side=side, where=where)
