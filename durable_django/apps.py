from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules
from django.utils.translation import gettext_lazy as _


class DurableConfig(AppConfig):
    name = "durable_django"
    label = "durable_django"
    verbose_name = _("Durable execution")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  registers the system checks
        from .contrib import tasks as tasks_plugin

        # Runs named by an import path are Django Tasks runs: the plug-in resolves them, where the
        # tasks framework is installed (Django 6, or the django-tasks backport).
        if tasks_plugin.framework_installed():
            tasks_plugin.install()

        # Like admin.py: every installed app's durable.py registers its functions.
        autodiscover_modules("durable")
