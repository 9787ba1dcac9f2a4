{#- The chosen sink's exporter.py: template/templates/sinks/<sink>/exporter.py (see docs/template.md). -#}
{% include "sinks/" ~ cookiecutter.sink ~ "/exporter.py" -%}
