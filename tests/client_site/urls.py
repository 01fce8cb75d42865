from django.urls import path

from . import views

urlpatterns = [
    path("health/", views.health),
    path("tight/", views.tight),
    path("minute/", views.minute),
    path("storm/", views.storm),
]
