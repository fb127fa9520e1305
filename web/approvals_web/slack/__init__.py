"""Slack on the web side: the signed interactions endpoint, decisions from clicks and modals, account linking.

Building and sending Slack messages is the core's (`approvals.channels.slack*`); this package
only answers what Slack sends back.
"""
