"""Tests of the MCP gateway (`approvals mcp`)."""
