"""The {{ cookiecutter.project_name }} exporter for TraceML.

Select it in TraceML with the setting ``{{ cookiecutter.package_name }}.exporter:make_exporter``.
"""

from __future__ import annotations

from .exporter import {{ cookiecutter.exporter_class }}, make_exporter

__all__ = ["{{ cookiecutter.exporter_class }}", "__version__", "make_exporter"]

__version__ = "0.1.0"
