"""The reviewer's pages: the inbox, a call's page and its decisions, runs, the audit log, login and users.

`inbox` holds the routes; `forms`, `views` and `timeline` work out in Python what the templates
only display.
"""
