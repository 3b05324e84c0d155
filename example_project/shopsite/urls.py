"""The example shop's URLs: the admin is where its orders and durable runs are watched; /ask/ streams an answer."""

from django.contrib import admin
from django.urls import path
from django.views.generic import RedirectView
from shop import streaming

urlpatterns = [
    path("admin/", admin.site.urls),
    path("ask/", streaming.ask),
    path("ask/<str:run_id>/", streaming.answer_page),
    path("ask/<str:run_id>/tokens", streaming.tokens),
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
]
