from django.urls import path

from . import views

urlpatterns = [
    path("usage/budgets/", views.BudgetListView.as_view(), name="budget_list"),
]
