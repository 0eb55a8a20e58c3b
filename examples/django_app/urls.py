"""The example's routes: its jobs, and persched's dashboard under /persched/."""

from __future__ import annotations

from django.urls import include, path

from examples.django_app import views

urlpatterns = [
    path("jobs/", views.jobs),
    path("persched/", include("persched.integrations.django.urls")),
]
