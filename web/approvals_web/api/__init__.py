"""The JSON API under `/api`: its routes, request and response schemas, problem documents and docs page."""
