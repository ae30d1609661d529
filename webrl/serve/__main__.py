"""`python -m webrl.serve model_path=PATH [port=8000 host=127.0.0.1 ...]` (same as `webrl serve`)."""
import sys

from webrl.config import load_config
from webrl.serve.app import ServeConfig, serve_main

if __name__ == "__main__":
    sys.exit(serve_main(load_config(ServeConfig, None, sys.argv[1:])))
