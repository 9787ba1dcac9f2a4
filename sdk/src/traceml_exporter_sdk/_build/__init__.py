"""Building records: every way into the seven record classes, and the coercions they share.

``coerce`` (the one set of value coercions), ``projection`` (wire tables -> record
columns: the careful path, the reference), ``fast_builders`` (an envelope straight to
records), ``msgspec_lines`` and ``step_structs`` (a JSON Lines payload decoded by
msgspec). ``mapping.records_from_payload`` chooses among them; docs/layout.md says
which path builds records when. Nothing here is imported until used.
"""
