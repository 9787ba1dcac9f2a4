"""Around one export run: what it reads, how a worker is fed, and what it accounts for.

``payload_files`` (recorded payloads read back from a JSON Lines or msgpack file, for
``replay``), ``feeding`` (an ``ExportWorker`` fed from a reader without dropping, and
stopped early without losing track), ``report`` (``ExportReport``, ``ExportFailure``
and ``finalization_warning.json``, which the worker writes), ``exit_codes`` (the one
table of exit codes, the CLI's and the follow library's), ``redact`` (secrets out of
an exporter's error text) and ``shown`` (untrusted text escaped for lines and files).
"""
