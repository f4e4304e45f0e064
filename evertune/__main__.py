import sys

from evertune.apps.cli import main

sys.exit(main())
