"""The one-time links in notification e-mails: a page to confirm, then the decision."""
