{#- The chosen sink's sink_support.py: template/templates/sinks/<sink>/sink_support.py (see docs/template.md). -#}
{% include "sinks/" ~ cookiecutter.sink ~ "/sink_support.py" -%}
