"""Widgets: a single page of form controls for one-step tasks (layout.py, app.py, tasks.py)."""
