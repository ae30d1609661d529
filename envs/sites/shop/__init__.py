"""Shop: an online store in the spirit of DeepShop (catalog.py, app.py, tasks.py)."""
