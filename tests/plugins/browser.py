"""Session fixtures for Chromium and local HTTP servers (owned by the envs work)."""
