from django.urls import path

from . import views

urlpatterns = [
    path("usage/budgets/", views.BudgetListView.as_view(), name="budget_list"),
    path("usage/budgets/<int:pk>/remove/", views.BudgetDeleteView.as_view(), name="budget_delete"),
]
