from django.contrib import admin
from django.urls import path

from tests import stream_views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("runs/<str:run_id>/tokens", stream_views.tokens),
]
