"""Deployment: turn a plan into configs an engine and a cluster run (see ``planner.deploy.export``)."""
