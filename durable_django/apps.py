from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class DurableConfig(AppConfig):
    name = "durable_django"
    label = "durable_django"
    verbose_name = "Durable execution"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from . import checks  # noqa: F401  registers the system checks
        from .registry import registry
        from .tasks_runtime import task_handler

        # Runs named by an import path are Django Tasks runs: the plug-in resolves them.
        registry.set_path_resolver(task_handler)

        # Like admin.py: every installed app's durable.py registers its functions.
        autodiscover_modules("durable")
