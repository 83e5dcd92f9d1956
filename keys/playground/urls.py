from django.urls import path

from . import views

urlpatterns = [
    path("playground/", views.PlaygroundView.as_view(), name="playground"),
    path("playground/credential/", views.issue_credential, name="playground_credential"),
    path("playground/calls/<str:request_id>/", views.call_record, name="playground_record"),
]
