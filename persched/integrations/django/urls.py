"""The dashboard's URLs: ``path("persched/", include("persched.integrations.django.urls"))``."""

from __future__ import annotations

from django.urls import path

from .views import dashboard

app_name = "persched"
urlpatterns = [path("", dashboard, name="dashboard"), path("<path:path>", dashboard, name="page")]
