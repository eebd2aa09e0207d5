"""``ps`` folds a replica group into one row (``runtime.group.fold_rows``), reading the
labels defensively: a replica whose router is gone, or a row that only claims to be a
router of another group, stays a row of its own."""

from __future__ import annotations

from instinct_serve.runtime.endpoints import Row
from instinct_serve.runtime.group import fold_rows, replica_index


def row(
    name: str, group: str | None = None, role: str | None = None, replica: int | None = None
) -> Row:
    return Row(
        name,
        "docker",
        "m",
        8000,
        "running",
        True,
        1.0,
        None,
        group=group,
        role=role,
        replica=replica,
    )


def test_a_group_is_its_routers_row_with_replicas_in_order() -> None:
    rows = [
        row("g-r1", "g", "replica", 1),
        row("g", "g", "router"),
        row("g-r0", "g", "replica", 0),
        row("solo"),
    ]
    folded = fold_rows(rows)
    assert [r.name for r in folded] == ["g", "solo"]
    assert [m.name for m in folded[0].members] == ["g-r0", "g-r1"]
    doc = folded[0].to_dict()
    assert doc["role"] == "router" and [m["replica"] for m in doc["members"]] == [0, 1]
    assert "members" not in folded[1].to_dict()  # a plain endpoint's document is unchanged


def test_orphans_and_impostors_stay_rows_of_their_own() -> None:
    rows = [row("g-r0", "g", "replica", 0), row("x", "other", "router")]
    assert [r.name for r in fold_rows(rows)] == ["g-r0", "x"]


def test_replica_index_label_is_read_defensively() -> None:
    key = "instinct-serve.replica"
    assert replica_index({key: "3"}) == 3
    for bad in ("-1", "²", "9999999", "", "1\n"):
        assert replica_index({key: bad}) is None
    assert replica_index({}) is None
