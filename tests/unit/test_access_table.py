"""The access table as data: what each role needs on a route's topics."""

from __future__ import annotations

from cutover.access import Operation, Role, required_rights, route_resources
from cutover.settings import RouterSettings, Transactions, parse_settings


def _settings(**route: object) -> RouterSettings:
    return parse_settings({"bootstrap": "k:9093", "group_id": "routers",
                           "routes": [{"name": "orders", "inputs": ["orders.blue",
                                                                     "orders.green"],
                                       "output": "orders", **route}]})


def _rows(role: Role, **route: object) -> set[tuple[str, str, str]]:
    return {(r.resource.kind.value, r.resource.name, r.operation.value)
            for r in required_rights(_settings(**route), role)}


def test_router_row() -> None:
    assert _rows(Role.ROUTER, shadow="orders.shadow") == {
        ("topic", "bg.control", "Read"), ("topic", "orders.blue", "Read"),
        ("topic", "orders.green", "Read"), ("topic", "orders", "Read"),
        ("topic", "orders", "Write"), ("topic", "orders.dlq", "Write"),
        ("topic", "orders.shadow", "Write"), ("topic", "orders", "DescribeConfigs"),
        ("topic", "orders.dlq", "DescribeConfigs"), ("topic", "orders.shadow", "DescribeConfigs"),
        ("topic", "bg.status", "Read"),
        ("topic", "bg.status", "Write"), ("topic", "routers.checkpoints", "Read"),
        ("topic", "routers.checkpoints", "Write"), ("group", "routers", "Read"),
        ("transactional-id", "routers.", "Write")}


def test_the_transactional_ids_are_one_prefix_and_not_needed_without_transactions() -> None:
    txn = [r for r in required_rights(_settings(), Role.ROUTER)
           if r.resource.kind.value == "transactional-id"]
    assert len(txn) == 1 and txn[0].resource.prefixed
    assert "--transactional-id routers. --resource-pattern-type prefixed" in \
        txn[0].kafka_acls("User:router", "k:9093")
    off = _settings().model_copy(update={"transactions": Transactions.OFF})
    assert all(r.resource.kind.value != "transactional-id"
               for r in required_rights(off, Role.ROUTER))


def test_operator_and_job_rows() -> None:
    assert _rows(Role.OPERATOR) == {
        ("topic", "bg.control", "Write"), ("topic", "bg.control", "Read"),
        ("topic", "bg.status", "Read"), ("topic", "orders.blue", "Describe")}
    assert _rows(Role.JOB) == {("topic", "orders.blue", "Write"),
                               ("topic", "orders.green", "Write")}
    only = required_rights(_settings(), Role.JOB, job_topic="orders.green")
    assert [(r.resource.name, r.operation) for r in only] == [("orders.green", Operation.WRITE)]


def test_no_role_may_write_the_control_topic_but_the_operator() -> None:
    for role in Role:
        writes = {r.resource.name for r in required_rights(_settings(), role)
                  if r.operation is Operation.WRITE}
        assert ("bg.control" in writes) is (role is Role.OPERATOR)


def test_least_privilege_is_checked_on_every_topic_and_the_group() -> None:
    names = {(r.kind.value, r.name) for r in route_resources(_settings(shadow="s"))}
    assert names == {("topic", n) for n in ("bg.control", "bg.status", "routers.checkpoints",
                                            "orders.blue", "orders.green", "orders",
                                            "orders.dlq", "s")} | {("group", "routers")}
