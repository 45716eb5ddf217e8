"""A route on the secured broker, every part with its own least-privilege identity.

The router logs in as ``router-*`` (password from a file), the emulated tagged jobs as
``job-*``, and the operator runs ``cutover switch/status/wait`` as ``operator-*`` (password
from an environment variable), with plans signed by a key from a file. The output holds every
event exactly once from the primary of its event time, and no password appears in a log, a
command's output, or a status record.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from tests.children import RouterChild
from tests.integration.harness import BASE_T, STEP, check_output, events
from tests.security.support import SecuredRoute, SecureJob, assert_no_secret

pytestmark = [pytest.mark.security, pytest.mark.broker]


def _plan_key(tmp_path: Path) -> dict[str, str]:
    key = tmp_path / "plan.key"
    key.write_text(secrets.token_hex(32) + "\n")
    key.chmod(0o600)
    return {"CUTOVER_PLAN_KEY_FILE": str(key)}


def _router(route: SecuredRoute, env: dict[str, str], name: str = "router") -> RouterChild:
    child = RouterChild(route.write_settings(route.router),
                        route.tmp / f"{route.name}-{name}.log", extra_env=env)
    child.wait_started()
    return child


def test_a_route_runs_end_to_end_with_least_privilege_and_signed_plans(
        route: SecuredRoute, tmp_path: Path) -> None:
    signing = _plan_key(tmp_path)
    router = _router(route, signing)
    runs = []
    try:
        blue, green = SecureJob(route, "blue"), SecureJob(route, "green")
        runs.append(route.cli(route.operator, "switch", "--route", route.route, "--to", "blue",
                              "--at", "auto", env=signing))
        assert runs[-1].code == 0, runs[-1].text
        for lo in range(0, 400, 100):
            blue.emit(events(lo, lo + 100))
            green.emit(events(lo, lo + 100))
        route.wait_horizon(BASE_T + 398 * STEP, versions=("blue", "green"))
        runs.append(route.cli(route.operator, "switch", "--route", route.route, "--to",
                              "green", "--at", "auto", "--margin", "1s", env=signing))
        assert runs[-1].code == 0, runs[-1].text
        plan = route.view().plan
        assert plan is not None and plan.signature and plan.transition is not None
        boundary = plan.transition[2]
        for lo in range(400, 800, 100):
            green.emit(events(lo, lo + 100))
            blue.emit(events(lo, lo + 100))
        runs.append(route.cli(route.operator, "wait", "--route", route.route, "--for",
                              "clear-to-teardown", "--timeout", "60s", env=signing))
        assert runs[-1].code == 0, runs[-1].text
        evs = events(0, 800)
        route.wait_output(len(evs))
        check_output(route, evs, lambda p, t: "green" if t >= boundary else "blue")  # type: ignore[arg-type]
        runs.append(route.cli(route.operator, "status", "--route", route.route, "--json",
                              env=signing))
        assert runs[-1].code == 0, runs[-1].text
        status = json.loads(runs[-1].out)[route.route]
        assert status["transition"]["state"] == "CLEAR_TO_TEARDOWN"
        assert status["counters"]["forwarded"] == len(evs)
    finally:
        router.stop()
    assert "Traceback" not in router.text()
    records = "\n".join((m.value() or b"").decode() for m in route.read(route.status))
    texts = {"router log": router.text(), "status records": records,
             **{f"cutover command {i}": r.text for i, r in enumerate(runs)}}
    assert_no_secret(texts, route.router, route.operator, route.job)


def test_an_unsigned_plan_from_the_operators_identity_is_rejected_and_the_last_kept(
        route: SecuredRoute, tmp_path: Path) -> None:
    signing = _plan_key(tmp_path)
    router = _router(route, signing)
    try:
        blue, green = SecureJob(route, "blue"), SecureJob(route, "green")
        first = route.cli(route.operator, "switch", "--route", route.route, "--to", "blue",
                          "--at", "auto", env=signing)
        assert first.code == 0, first.text
        blue.emit(events(0, 100))
        green.emit(events(0, 100))
        route.wait_horizon(BASE_T + 98 * STEP, versions=("blue", "green"))
        # Allowed to write the control topic, but without the key: the broker takes it ...
        unsigned = route.cli(route.operator, "switch", "--route", route.route, "--to", "green",
                             "--at", "auto", "--margin", "1s")
        assert unsigned.code == 0 and "published" in unsigned.out, unsigned.text
        # ... and the router refuses it, keeping the signed plan.
        route.wait_for("plan_rejected", lambda: any(
            b'"plan_rejected"' in (m.value() or b"") for m in route.read(route.status)))
        rejected = [json.loads(m.value()) for m in route.read(route.status)
                    if b'"plan_rejected"' in (m.value() or b"")]
        assert rejected[-1]["epoch"] == 2 and "unsigned plan" in rejected[-1]["reason"]
        blue.emit(events(100, 300))
        green.emit(events(100, 300))
        evs = events(0, 300)
        route.wait_output(len(evs))
        check_output(route, evs, lambda p, t: "blue")  # type: ignore[arg-type]
        shown = route.cli(route.operator, "status", "--route", route.route, "--json",
                          env=signing)
        st = json.loads(shown.out)[route.route]
        assert st["epoch"] == 1 and st["plan"]["segments"][-1]["primary"] == "blue"
        assert "unsigned plan" in st["last_rejection"]["reason"]
    finally:
        router.stop()
    assert "Traceback" not in router.text()


def test_a_router_with_a_wrong_password_says_so_and_retries_until_it_is_right(
        route: SecuredRoute) -> None:
    right = route.router.password
    wrong = secrets.token_urlsafe(24)
    route.router.write_secret(wrong)
    router = RouterChild(route.write_settings(route.router), route.tmp / "wrong-password.log")
    try:
        router.wait_for_line("retrying in 2s", timeout=60)
        refusal = (f"refused the connection: authentication failed: the broker refused the "
                   f"SCRAM-SHA-512 login of user '{route.router.user}' (wrong user name or "
                   "password); check kafka: sasl.username and the secret sasl.password refers "
                   "to; retrying in 1s")
        assert refusal in router.text()
        # The password is rotated on the broker to what the router has: its next try gets in.
        route.kafka.set_password(route.router.user, wrong)
        router.wait_started(timeout=90)
        blue = SecureJob(route, "blue")
        first = route.cli(route.operator, "switch", "--route", route.route, "--to", "blue",
                          "--at", "auto")
        assert first.code == 0, first.text
        blue.emit(events(0, 200))
        route.wait_output(200)
        check_output(route, events(0, 200), lambda p, t: "blue")  # type: ignore[arg-type]
    finally:
        router.stop()
    text = router.text()
    assert "Traceback" not in text
    assert right not in text and wrong not in text
