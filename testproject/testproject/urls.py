from django.contrib import admin
from django.urls import include, path

from demo import views

urlpatterns = [
    path("", views.index, name="index"),
    path("hello/", views.hello, name="hello"),
    path("preview/", views.preview, name="preview"),
    path("admin/", admin.site.urls),
    path("", include("demo.surfaces")),
]
