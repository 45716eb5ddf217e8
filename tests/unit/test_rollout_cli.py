"""``cutover rollout``'s refusals that need no broker: each says what is wrong and how to fix
it, exit code 2, no traceback."""

from __future__ import annotations

import pytest

from cutover.cli import main


@pytest.mark.parametrize(("argv", "says"), [
    (["--route", "r", "--bootstrap", "x:1"], "a rollout needs --to, --start, --stop-old; e.g."),
    (["--route", "r", "--to", "g", "--start", "s", "--bootstrap", "x:1"],
     "a rollout needs --stop-old"),
    (["--route", "r", "--resume", "--to", "g", "--bootstrap", "x:1"],
     "--resume continues the journaled rollout as it was started; drop --to"),
    (["--route", "r", "--resume", "--abort", "--bootstrap", "x:1"],
     "--resume and --abort exclude each other"),
    (["--route", "r", "--to", "g", "--start", "s", "--stop-old", "k", "--deadline", "soon",
      "--bootstrap", "x:1"], "'soon' is not a duration; write e.g. 500ms, 30s, 10m, 2h"),
    (["--route", "r", "--to", "g", "--start", "s", "--stop-old", "k", "--max-diff", "2",
      "--bootstrap", "x:1"], "--max-diff '2' is not a share of records"),
    (["--route", "r", "--to", "g", "--start", "s", "--stop-old", "k", "--compare",
      "--bootstrap", "x:1"], "--compare reads the route's raw topics: pass --config"),
    (["--route", "r", "--to", "g", "--start", "s", "--stop-old", "k", "--config",
      "/nonexistent.yaml"], "cannot read settings file"),
    (["--route", "r", "--to", "g", "--start", "s", "--stop-old", "k", "--canary", "25%,5%,100%",
      "--bootstrap", "x:1"], "shares only grow"),
    (["--route", "r", "--to", "g", "--start", "s", "--stop-old", "k", "--canary", "5%,25%",
      "--bootstrap", "x:1"], "end the steps with 100%"),
    (["--route", "r", "--to", "g", "--start", "s", "--stop-old", "k", "--canary", "5%,100%",
      "--canary-for", "a while", "--bootstrap", "x:1"], "'a while' is not a duration"),
    (["--route", "r", "--resume", "--canary", "5%,100%", "--bootstrap", "x:1"],
     "--resume continues the journaled rollout as it was started; drop --canary"),
])
def test_refusals_say_what_to_fix(argv: list[str], says: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rollout", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cutover rollout: ") and says in err, err
    assert "Traceback" not in err


def test_compare_needs_the_settings_file(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["compare", "--route", "r", "--new", "g"])
    assert exc.value.code == 2
    assert "--config" in capsys.readouterr().err
