"""The example's one route."""

from __future__ import annotations

from django.urls import path

from examples.django_app import views

urlpatterns = [path("jobs/", views.jobs)]
