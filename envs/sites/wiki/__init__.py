"""Wiki: a fictional encyclopedia with infoboxes, tables and links (world.py, app.py, tasks.py)."""
