"""How a cluster's nodes are dealt into tick relay groups (--tick-group)."""

from __future__ import annotations

from loadgen.tick_relay import GROUP_AUTO, group_size, groups


def test_nodes_are_dealt_in_order_into_groups_of_the_size_asked() -> None:
    assert groups(list(range(5)), 2) == [[0, 1], [2, 3], [4]]
    assert groups(list(range(3)), 3) == [[0, 1, 2]]
    assert groups(list(range(3)), 8) == [[0, 1, 2]]
    assert groups([], 2) == []


def test_groups_are_made_on_more_than_eight_nodes_unless_asked() -> None:
    assert group_size(None, GROUP_AUTO) == 0
    assert group_size(None, GROUP_AUTO + 1) == GROUP_AUTO
    assert group_size(None, 100) == GROUP_AUTO
    assert group_size(0, 100) == 0  # --tick-group 0: every node asked directly
    assert group_size(2, 3) == 2
