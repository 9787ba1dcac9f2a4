"""The bridge to TraceML 0.5.0, which has no exporter hook: its SQLite database, read back.

``sqlite_source`` (a database, finished or live, of either table layout, read page by
page), ``sqlite_pages`` (a page bounded in bytes as well as rows), ``sqlite_rows`` (its
rows -> records, coerced as the payload path), ``database_holders`` (which processes
have the database open, from ``/proc``) and ``follow/`` (following a live run into an
exporter). ``replay --sqlite`` and ``follow`` use it; docs/follow.md describes both.
"""
