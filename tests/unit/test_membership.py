"""Rendezvous ownership (`persched._engine.membership.owner_among`): a join or a departure moves only
that member's share of the jobs, and every instance computes the same owner."""

from __future__ import annotations

from collections import Counter

import pytest

from persched._engine.membership import owner_among

JOBS = [f"job-{i}" for i in range(4000)]
THREE = ("host-a:11:x", "host-b:22:y", "host-c:33:z")
NEW = "host-d:44:w"


def owners(members: tuple[str, ...]) -> dict[str, str]:
    return {job: owner_among(members, job) for job in JOBS}


def test_every_member_owns_about_its_share() -> None:
    shares = Counter(owners(THREE).values())
    assert set(shares) == set(THREE)
    assert all(abs(n / len(JOBS) - 1 / 3) < 0.05 for n in shares.values()), shares


def test_a_joining_member_takes_only_jobs_and_about_its_share() -> None:
    before, after = owners(THREE), owners((*THREE, NEW))
    moved = [job for job in JOBS if before[job] != after[job]]
    assert {after[job] for job in moved} == {NEW}  # no job moves between the old members
    assert abs(len(moved) / len(JOBS) - 1 / 4) < 0.05


def test_a_leaving_member_hands_over_only_its_own_jobs() -> None:
    before, after = owners(THREE), owners(THREE[1:])
    assert {job for job in JOBS if before[job] != after[job]} == {job for job in JOBS if before[job] == THREE[0]}


@pytest.mark.parametrize("order", [THREE, THREE[::-1], (THREE[1], THREE[0], THREE[2])])
def test_the_owner_does_not_depend_on_the_order_of_the_view(order: tuple[str, ...]) -> None:
    assert owners(order) == owners(THREE)


def test_job_ids_that_are_not_plain_text_have_an_owner() -> None:
    assert owner_among(THREE, "\udcff lone surrogate") in THREE
    assert owner_among(THREE, "") in THREE
