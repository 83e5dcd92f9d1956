from django.apps import AppConfig


class ClientConfigsConfig(AppConfig):
    name = "clientconfigs"
    verbose_name = "Client configs"
