{#- The chosen sink's test_exporter.py: template/templates/sinks/<sink>/test_exporter.py (see docs/template.md). -#}
{% include "sinks/" ~ cookiecutter.sink ~ "/test_exporter.py" -%}
