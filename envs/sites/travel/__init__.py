"""Travel: a flight search and booking site (world.py, app.py, tasks.py)."""
