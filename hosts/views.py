"""Host pages (admin): list, create, edit, detail with GPUs, delete."""

from __future__ import annotations

from django.contrib import messages
from django.urls import reverse, reverse_lazy
from django.views.generic import CreateView, DeleteView, DetailView, UpdateView

from portal.ui import AdminRequiredMixin, FilteredListView, InvalidFormStatusMixin, SafeDeleteMixin

from .deploy_views import host_gpus_context
from .filters import HostFilterSet
from .forms import HostForm
from .models import Host


class HostListView(AdminRequiredMixin, FilteredListView):
    model = Host
    filterset_class = HostFilterSet
    template_name = "hosts/host_list.html"

    def get_base_queryset(self):
        return Host.objects.prefetch_related("gpus").order_by("name")

    def get_context_data(self, **kwargs):
        return super().get_context_data(filter_fields=["label"], **kwargs)


class HostCreateView(AdminRequiredMixin, InvalidFormStatusMixin, CreateView):
    model = Host
    form_class = HostForm
    template_name = "hosts/host_form.html"

    def form_valid(self, form):
        response = super().form_valid(form)
        messages.success(self.request, f"Host {self.object.name} added.")
        return response

    def get_success_url(self):
        return reverse("host_detail", args=[self.object.pk])


class HostUpdateView(AdminRequiredMixin, InvalidFormStatusMixin, UpdateView):
    model = Host
    form_class = HostForm
    template_name = "hosts/host_form.html"

    def form_valid(self, form):
        note = ""
        if form.cleaned_data.get("private_key"):
            note = " (private key replaced)"
        elif form.cleaned_data.get("clear_private_key"):
            note = " (private key removed)"
        response = super().form_valid(form)
        messages.success(self.request, f"Host {self.object.name} saved{note}.")
        return response

    def get_success_url(self):
        return reverse("host_detail", args=[self.object.pk])


class HostDetailView(AdminRequiredMixin, DetailView):
    model = Host
    template_name = "hosts/host_detail.html"
    context_object_name = "host"

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context.update(host_gpus_context(self.object))
        context["channels"] = self.object.channels.order_by("name")
        return context


class HostDeleteView(AdminRequiredMixin, SafeDeleteMixin, DeleteView):
    model = Host
    template_name = "hosts/host_confirm_delete.html"
    context_object_name = "host"
    success_url = reverse_lazy("host_list")

    def form_valid(self, form):
        name = self.object.name
        response = super().form_valid(form)
        messages.success(self.request, f"Host {name} deleted.")
        return response
