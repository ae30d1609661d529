"""`python -m webrl.cli` is the `webrl` command."""
import sys

from webrl.cli import main

sys.exit(main())
