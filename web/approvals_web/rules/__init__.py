"""Standing and remembered rules: the pages (`pages`) and the JSON API (`api`), checked by the same helpers."""
