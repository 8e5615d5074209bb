"""The plan: a pure function of (site, request) that decides where every rank runs."""

from hpcdl.plan.model import Plan, RankPlacement
from hpcdl.plan.planner import check_request, make_plan
from hpcdl.plan.request import JobRequest

__all__ = ["JobRequest", "Plan", "RankPlacement", "check_request", "make_plan"]
