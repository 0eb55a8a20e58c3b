"""The example's one route."""

from __future__ import annotations

from django.urls import path

from examples.django_app import dashboard, views

urlpatterns = [
    path("jobs/", views.jobs),
    # persched's dashboard under /persched/ (examples/django_app/dashboard.py)
    path("persched/", dashboard.persched_dashboard),
    path("persched/<path:path>", dashboard.persched_dashboard),
]
