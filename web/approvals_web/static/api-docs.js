// The API's docs: Swagger UI (vendored, web/approvals_web/static/swagger-ui-5.35.0) over our OpenAPI schema.
window.addEventListener("DOMContentLoaded", () => {
  window.ui = SwaggerUIBundle({ url: "/api/openapi.json", dom_id: "#swagger-ui", deepLinking: true });
});
