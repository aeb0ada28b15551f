"""The checkers in tests/infra/checks find nothing wrong with the real tree.

Each checker is proved to catch its class of mistake in test_mutations.py.
"""

from __future__ import annotations

import pytest
from checks import CHECKS, check_schemas
from checks.bicep_lang import check_language
from checks.contract import (
    check_admission,
    check_app_metrics,
    check_function_app,
    check_lock_budget,
    check_logging_feeds_alerts,
    check_metrics,
    check_roles,
)
from checks.platform import (
    check_base_image_pinned,
    check_extra_ports_observed,
    check_gpu_build,
    check_probes,
    check_profile_moves,
    check_windows_hooks,
)
from checks.prediction_log import check_prediction_log
from checks.redis_stores import check_redis_stores
from checks.rows import cited, rows
from checks.tables import BUILT_IN_ROLES, EXPECTED_GRANTS, UNMODELLED_API_VERSIONS
from conftest import REPO, TRIGGER_QUEUE, app_setting_names


def test_every_resource_matches_its_rest_model_at_its_api_version() -> None:
    assert check_schemas(REPO) == []


def test_every_symbol_module_argument_and_literal_type_resolves() -> None:
    assert check_language(REPO / "infra") == []


def test_roles_are_reviewed_built_ins_and_least_privilege() -> None:
    assert check_roles(REPO) == []


def test_metric_names_exist_for_their_resource_type() -> None:
    assert check_metrics(REPO) == []


def test_alerts_read_the_metrics_the_app_emits() -> None:
    """The queue-age alert reads `customMetrics` by the name in shared/telemetry/catalogue.py."""
    assert check_app_metrics(REPO) == []


def test_host_json_logs_what_the_alerts_query() -> None:
    assert check_logging_feeds_alerts(REPO) == []


def test_a_batch_and_its_settling_fit_in_the_message_lock() -> None:
    assert check_lock_budget(REPO, TRIGGER_QUEUE) == []


def test_liveness_is_a_probe_the_host_throttle_cannot_answer() -> None:
    assert check_probes(REPO) == []


def test_the_ports_the_host_never_sees_scale_the_app_and_raise_alerts() -> None:
    assert check_extra_ports_observed(REPO) == []


def test_azd_builds_the_gpu_image_exactly_when_it_deploys_to_the_gpu() -> None:
    assert check_gpu_build(REPO) == []


def test_every_profile_state_and_move_keeps_the_profile_the_app_runs_on() -> None:
    assert check_profile_moves(REPO) == []


def test_a_windows_azd_run_never_skips_a_hook() -> None:
    assert check_windows_hooks(REPO) == []


@pytest.mark.xfail(
    strict=True, reason="the Dockerfile (issue 22's) still names its base by tag; pin proposed in issue 23"
)
def test_the_base_image_is_pinned_by_digest() -> None:
    assert check_base_image_pinned(REPO) == []


def test_the_base_image_check_cites_its_row() -> None:
    assert cited(check_base_image_pinned) <= rows(REPO) and cited(check_base_image_pinned)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_every_check_cites_the_platform_rows_it_enforces(name: str) -> None:
    """A check with no source row is a belief (docs/platform.md): find the source or drop it."""
    named = cited(CHECKS[name])
    assert named, f"check {name} cites no docs/platform.md row in its docstring"
    assert named <= rows(REPO), f"check {name} cites rows docs/platform.md lacks: {sorted(named - rows(REPO))}"


def test_every_platform_row_is_relied_on_and_cites_a_source() -> None:
    """Each row names its source (a URL, a repository file at a commit, or a package==version file)
    and what relies on it."""
    from checks.rows import ROW

    text = (REPO / "docs" / "platform.md").read_text()
    for line in text.splitlines():
        if ROW.match(line):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            assert len(cells) == 4, f"{cells[0]}: expected | id | behaviour | source | relied on by |"
            assert any(mark in cells[2] for mark in ("http", "@", "==")), f"{cells[0]}: its source is not pinned"
            assert cells[3], f"{cells[0]}: nothing relies on it"


def test_the_cache_redis_may_evict_predictions_and_feasts_store_nothing() -> None:
    assert check_redis_stores(REPO) == []


def test_the_decisions_go_to_an_append_only_container() -> None:
    assert check_prediction_log(REPO) == []


def test_the_host_admits_no_more_than_the_app_takes() -> None:
    assert check_admission(REPO) == []


def test_infra_agrees_with_function_app_and_settings() -> None:
    assert check_function_app(REPO, app_setting_names()) == []


@pytest.mark.parametrize("guid", sorted(BUILT_IN_ROLES))
def test_role_table_entries_cite_learn(guid: str) -> None:
    name, source = BUILT_IN_ROLES[guid]
    assert source.startswith("https://learn.microsoft.com/azure/role-based-access-control/built-in-roles/"), name


def test_expected_grants_name_only_reviewed_roles() -> None:
    names = {name for name, _ in BUILT_IN_ROLES.values()}
    assert {role for grants in EXPECTED_GRANTS.values() for role, _ in grants} <= names


def test_unmodelled_api_versions_say_where_they_come_from() -> None:
    assert all(len(source) > 40 for source in UNMODELLED_API_VERSIONS.values())
