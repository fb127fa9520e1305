"""The API's documentation page: Swagger UI served from our own static files, never from a CDN.

A page that loads a script from another site runs whatever that site serves; vendored
(web/approvals_web/static/swagger-ui-5.35.0, from the npm package swagger-ui-dist) it is the code we
shipped. Swagger UI sets inline styles, so this one page allows them in its CSP.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from ..hardening import CONTENT_SECURITY_POLICY

router = APIRouter(include_in_schema=False)

SWAGGER = "/static/swagger-ui-5.35.0"
DOCS_POLICY = CONTENT_SECURITY_POLICY.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")
PAGE = f"""<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>approvals API</title>
  <link rel="stylesheet" href="{SWAGGER}/swagger-ui.css">
  <script src="{SWAGGER}/swagger-ui-bundle.js" defer></script>
  <script src="/static/api-docs.js" defer></script>
</head>
<body><div id="swagger-ui"></div></body>
</html>
"""


@router.get("/api/docs")
async def api_docs() -> HTMLResponse:
    return HTMLResponse(PAGE, headers={"Content-Security-Policy": DOCS_POLICY})
