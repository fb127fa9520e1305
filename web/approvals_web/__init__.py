"""The reviewer's web app and JSON API, thin over the `approvals` core."""
